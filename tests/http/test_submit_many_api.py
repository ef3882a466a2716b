"""Native bulk submission over real HTTP, on both backends: POST /v1/jobs/bulk."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api_server import Api
from tests.storage.helpers import queued

CHAT = "/v1/chat/completions"


def item(text: str = "hello", **extra: Any) -> dict[str, Any]:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": text}]}
    return {"endpoint": CHAT, "body": body, **extra}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_bulk_stores_every_item_and_answers_in_order(api: Api) -> None:
    key = await api.key("acme")
    items = [item(f"n{i}", metadata={"n": i}) for i in range(25)]
    response = await api.http.post("/v1/jobs/bulk", json={"jobs": items}, headers=auth(key))
    assert response.status_code == 200
    data = response.json()["data"]
    assert [job["metadata"]["n"] for job in data] == list(range(25))
    assert {job["status"] for job in data} == {"queued"}
    assert len({job["id"] for job in data}) == 25
    got = await api.http.get(f"/v1/jobs/{data[7]['id']}", headers=auth(key))
    assert got.json()["metadata"] == {"n": 7}


async def test_bulk_items_keep_every_submit_field(api: Api) -> None:
    """A bulk item is a whole POST /v1/jobs body: scheduling, concurrency key and stream too."""
    key = await api.key("acme")
    items = [item("later", delay_s=3600, concurrency_key="user-7", stream=True), item("now")]
    response = await api.http.post("/v1/jobs/bulk", json={"jobs": items}, headers=auth(key))
    later, now = response.json()["data"]
    assert later["run_at"] >= later["created_at"] + 3599
    assert now["run_at"] <= now["created_at"] + 1
    stored = await api.runtime.storage.job_get(job_id=later["id"])
    assert stored is not None and stored.concurrency_key == "user-7"


async def test_bulk_keys_replay_per_item_and_share_the_single_submit_binding(api: Api) -> None:
    key = await api.key("acme")
    single = await api.http.post(
        "/v1/jobs", json=item("a"), headers={**auth(key), "Idempotency-Key": "k-a"}
    )
    assert single.status_code == 202
    first = await api.http.post(
        "/v1/jobs/bulk",
        json={
            "jobs": [item("a", idempotency_key="k-a"), item("b", idempotency_key="k-b"), item("c")]
        },
        headers=auth(key),
    )
    data = first.json()["data"]
    assert data[0]["id"] == single.json()["id"] and data[0]["idempotent_replayed"] is True
    assert "idempotent_replayed" not in data[1]
    again = await api.http.post(
        "/v1/jobs/bulk",
        json={"jobs": [item("b", idempotency_key="k-b"), item("c")]},
        headers=auth(key),
    )
    replay = again.json()["data"]
    assert replay[0]["id"] == data[1]["id"] and replay[0]["idempotent_replayed"] is True
    assert replay[1]["id"] != data[2]["id"]  # a keyless item is a new job every time
    tenant = (await api.runtime.tenants.authenticate(key)).id
    assert await queued(api.runtime.storage, tenant) == 4  # a, b, c, and the second c


async def test_a_key_repeated_in_one_call_binds_to_the_first_item(api: Api) -> None:
    key = await api.key("acme")
    response = await api.http.post(
        "/v1/jobs/bulk",
        json={"jobs": [item("x", idempotency_key="dup"), item("x", idempotency_key="dup"),
                       item("y", idempotency_key="dup")]},
        headers=auth(key),
    )  # fmt: skip
    data = response.json()["data"]
    assert data[1]["id"] == data[0]["id"] and data[1]["idempotent_replayed"] is True
    assert data[2]["object"] == "error" and data[2]["status"] == 422
    assert data[2]["code"] == "idempotency_key_reused"


async def test_a_bad_item_is_refused_alone(api: Api) -> None:
    key = await api.key("acme")
    jobs = [
        item("ok-1"),
        {"endpoint": CHAT},  # no body
        item("unknown-model", body={"model": "gpt-nope", "messages": []}),
        "not an object",
        item("ok-2", priority=99),
        item("ok-3", idempotency_key="bad\nkey"),
        item("ok-4"),
    ]
    response = await api.http.post("/v1/jobs/bulk", json={"jobs": jobs}, headers=auth(key))
    assert response.status_code == 200
    data = response.json()["data"]
    assert [entry["object"] for entry in data] == [
        "job", "error", "error", "error", "error", "error", "job"
    ]  # fmt: skip
    assert data[1]["status"] == 400 and data[1]["error"]["param"] == "body"
    assert data[2]["error"]["code"] == "model_not_found" or data[2]["status"] == 400
    assert data[4]["error"]["param"] == "priority"
    assert data[5]["code"] == "invalid_idempotency_key"
    tenant = (await api.runtime.tenants.authenticate(key)).id
    assert await queued(api.runtime.storage, tenant) == 2


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"jobs": [item()] * 1001}, 400, "too_many_items"),
        ({"jobs": "x"}, 400, "invalid_request"),
        ({"items": []}, 400, "invalid_request"),
        ([1, 2], 400, "invalid_request"),
    ],
)
async def test_malformed_calls_are_refused_whole(
    api: Api, body: Any, status: int, code: str
) -> None:
    key = await api.key("acme")
    response = await api.http.post("/v1/jobs/bulk", json=body, headers=auth(key))
    assert response.status_code == status
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code
    tenant = (await api.runtime.tenants.authenticate(key)).id
    assert await queued(api.runtime.storage, tenant) == 0


async def test_invalid_json_is_a_problem(api: Api) -> None:
    key = await api.key("acme")
    response = await api.http.post(
        "/v1/jobs/bulk", content=b"{nope", headers={**auth(key), "Content-Type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["code"] == "invalid_json"


async def test_one_thousand_items_fit_in_one_call(api: Api) -> None:
    key = await api.key("acme")
    small = {"endpoint": CHAT, "body": {"model": "sim-echo", "messages": []}}
    response = await api.http.post(
        "/v1/jobs/bulk",
        json={"jobs": [{**small, "idempotency_key": f"k{i}"} for i in range(1000)]},
        headers=auth(key),
    )
    assert response.status_code == 200
    assert len(response.json()["data"]) == 1000


async def test_bulk_needs_an_api_key(api: Api) -> None:
    response = await api.http.post("/v1/jobs/bulk", json={"jobs": [item()]})
    assert response.status_code == 401
