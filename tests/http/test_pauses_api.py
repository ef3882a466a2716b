"""Pauses over real HTTP, on both backends: an operator pauses and resumes claims by provider,
model and tenant; refusals (unknown provider, model or tenant, a tenant key, no key, an unknown
pause) answer problem+json."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate.domain.states import JobState
from tests.api_server import Api

CHAT = "/v1/chat/completions"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def submit(api: Api, key: str, model: str = "sim-echo") -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    response = await api.http.post(
        "/v1/jobs", json={"endpoint": CHAT, "body": body}, headers=auth(key)
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    return job_id


async def pause(api: Api, key: str, **body: Any) -> dict[str, Any]:
    response = await api.http.post("/v1/pauses", json=body, headers=auth(key))
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def claimed(api: Api) -> set[str]:
    """The ids one claim of a worker takes now."""
    jobs = await api.runtime.worker(worker_id="w").claim()
    return {job.id for job in jobs}


async def test_an_operator_pauses_and_resumes_a_provider(api: Api) -> None:
    operator = await api.runtime.operators.create("alice")
    key = await api.key("acme")
    held = await submit(api, key)
    created = await pause(api, operator, provider="sim", reason="provider incident")
    assert created["object"] == "pause" and created["id"].startswith("pause_")
    assert (created["provider"], created["model"], created["tenant"]) == ("sim", None, None)
    assert (created["reason"], created["created_by"]) == ("provider incident", "alice")
    assert isinstance(created["created_at"], int)
    listed = (await api.http.get("/v1/pauses", headers=auth(operator))).json()
    assert listed["object"] == "list" and [p["id"] for p in listed["data"]] == [created["id"]]

    assert await claimed(api) == set()  # held in the queue, no attempt spent
    job = await api.runtime.storage.job_get(job_id=held)
    assert job is not None and job.state is JobState.QUEUED and job.attempt == 0

    deleted = await api.http.delete(f"/v1/pauses/{created['id']}", headers=auth(operator))
    assert deleted.status_code == 200
    assert deleted.json() | {"deleted": None} == created | {"deleted": None}
    assert deleted.json()["deleted"] is True
    assert (await api.http.get("/v1/pauses", headers=auth(operator))).json()["data"] == []
    assert await claimed(api) == {held}


async def test_a_tenant_pause_holds_that_tenant_only(api: Api) -> None:
    operator = await api.runtime.operators.create("alice")
    acme, beta = await api.key("acme"), await api.key("beta")
    held, free = await submit(api, acme), await submit(api, beta)
    created = await pause(api, operator, tenant="acme", model="sim-echo")
    assert (created["tenant"], created["model"]) == ("acme", "sim-echo")
    assert await claimed(api) == {free}
    await api.http.delete(f"/v1/pauses/{created['id']}", headers=auth(operator))
    assert await claimed(api) == {held}


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"provider": "nope"}, "unknown_provider", "provider"),
        ({"tenant": "nobody"}, "unknown_tenant", "tenant"),
        ({"model": "gpt-nothing", "provider": "sim"}, "model_not_found", "model"),
        ({"provider": ""}, "invalid_request", "provider"),
        ({"provider": "sim", "colour": "red"}, "invalid_request", None),
        ({"reason": "x" * 501}, "invalid_request", None),
    ],
)
async def test_a_pause_no_job_could_match_is_refused(
    api: Api, body: dict[str, Any], code: str, param: str | None
) -> None:
    operator = await api.runtime.operators.create("alice")
    response = await api.http.post("/v1/pauses", json=body, headers=auth(operator))
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == code
    if param is not None:
        assert problem["error"]["param"] == param
    assert (await api.http.get("/v1/pauses", headers=auth(operator))).json()["data"] == []


async def test_a_tenant_key_may_not_pause(api: Api) -> None:
    key = await api.key("acme")
    for method, path in (
        ("POST", "/v1/pauses"),
        ("GET", "/v1/pauses"),
        ("DELETE", "/v1/pauses/pause_1"),
    ):
        response = await api.http.request(
            method, path, json={} if method == "POST" else None, headers=auth(key)
        )
        assert response.status_code == 403, (method, response.text)
        assert response.json()["code"] == "forbidden"
    assert await api.runtime.storage.pause_list() == []


async def test_no_key_or_an_unknown_key_is_unauthorized(api: Api) -> None:
    assert (await api.http.get("/v1/pauses")).status_code == 401
    for key in ("jgo_nothing", "jg_nothing"):
        response = await api.http.post("/v1/pauses", json={}, headers=auth(key))
        assert response.status_code == 401, key


async def test_resuming_an_unknown_pause_is_not_found(api: Api) -> None:
    operator = await api.runtime.operators.create("alice")
    response = await api.http.delete("/v1/pauses/pause_missing", headers=auth(operator))
    assert response.status_code == 404 and response.json()["code"] == "not_found"
