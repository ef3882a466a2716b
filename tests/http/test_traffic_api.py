"""Traffic control over real HTTP: `run_at`, `delay_s` and `concurrency_key` on
POST /v1/jobs (ranges refused with 400), `metadata.concurrency_key` on /v1/responses, and the
worker honouring both."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate.storage.records import LimitOverrides
from tests.api_server import Api

CHAT = "/v1/chat/completions"


def job_body(**extra: Any) -> dict[str, Any]:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    return {"endpoint": CHAT, "body": body, **extra}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_delayed_job_is_queued_with_its_run_at(api: Api) -> None:
    key = await api.key("acme")
    response = await api.http.post("/v1/jobs", json=job_body(delay_s=3600), headers=auth(key))
    assert response.status_code == 202
    job = response.json()
    assert job["status"] == "queued"
    assert 3599 <= job["run_at"] - job["created_at"] <= 3601
    assert await api.runtime.worker().run_once() == []  # not before its time


async def test_run_at_in_the_past_runs_now(api: Api) -> None:
    key = await api.key("acme")
    response = await api.http.post("/v1/jobs", json=job_body(run_at=1), headers=auth(key))
    job = response.json()
    assert job["run_at"] == job["created_at"]
    (done,) = await api.runtime.worker().run_once()
    assert done is not None and done.id == job["id"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"delay_s": -1}, "delay_s"),
        ({"delay_s": 1e12}, "delay_s"),
        ({"run_at": 1e15}, "run_at"),
        ({"run_at": -5}, "run_at"),
        ({"run_at": 10, "delay_s": 10}, None),
        ({"concurrency_key": ""}, "concurrency_key"),
        ({"concurrency_key": "x" * 256}, "concurrency_key"),
        ({"concurrency_key": 7}, "concurrency_key"),
    ],
)
async def test_out_of_range_schedules_and_keys_are_400(
    api: Api, extra: dict[str, Any], param: str | None
) -> None:
    key = await api.key("acme")
    response = await api.http.post("/v1/jobs", json=job_body(**extra), headers=auth(key))
    assert response.status_code == 400, response.text
    if param is not None:
        assert response.json()["error"]["param"].startswith(param)


async def test_the_worker_holds_a_keys_cap(api: Api) -> None:
    key = await api.key("acme")
    tenant = await api.runtime.storage.tenant_get(name="acme")
    assert tenant is not None
    await api.runtime.storage.tenant_limits_set(
        tenant_id=tenant.id, overrides=LimitOverrides(max_running_per_key=1)
    )
    api.runtime.limits.invalidate()
    ids = []
    for user in ["u1", "u1", "u2"]:
        response = await api.http.post(
            "/v1/jobs", json=job_body(concurrency_key=user), headers=auth(key)
        )
        assert response.json()["concurrency_key"] == user
        ids.append(response.json()["id"])
    worker = api.runtime.worker()
    claimed = await worker.claim()
    assert sorted(job.id for job in claimed) == sorted([ids[0], ids[2]])


async def test_responses_take_the_key_from_metadata(api: Api) -> None:
    key = await api.key("acme")
    body = {
        "model": "sim-echo",
        "input": "hi",
        "background": True,
        "metadata": {"concurrency_key": "end-user-7"},
    }
    response = await api.http.post("/v1/responses", json=body, headers=auth(key))
    assert response.status_code == 200, response.text
    job = (await api.http.get(f"/v1/jobs/{response.json()['id']}", headers=auth(key))).json()
    assert job["concurrency_key"] == "end-user-7"
    too_long = {**body, "metadata": {"concurrency_key": "x" * 300}}
    refused = await api.http.post("/v1/responses", json=too_long, headers=auth(key))
    assert refused.status_code == 400


async def test_a_queued_job_shows_its_place_in_line(api: Api) -> None:
    key = await api.key("acme")
    ids = []
    for priority in (5, 5, 1):
        body = job_body(priority=priority)
        ids.append((await api.http.post("/v1/jobs", json=body, headers=auth(key))).json()["id"])
    later = (await api.http.post("/v1/jobs", json=job_body(delay_s=600), headers=auth(key))).json()
    positions = [
        (await api.http.get(f"/v1/jobs/{i}", headers=auth(key))).json()["queue_position"]
        for i in ids
    ]
    assert positions == [2, 3, 1]  # priority 1 goes first, then by submit
    got = (await api.http.get(f"/v1/jobs/{later['id']}", headers=auth(key))).json()
    assert got["queue_position"] == 4  # not claimable yet: everyone claimable is ahead
