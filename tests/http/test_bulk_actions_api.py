"""Bulk actions by filter over real HTTP: tenant isolation, operators across
tenants, dry runs, the cursor, and the audit trail, on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

from jobgate.domain.states import JobState
from jobgate.testing import Block, ScriptedProvider
from tests.api_server import Api

CHAT = "/v1/chat/completions"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def submit(api: Api, key: str, n: int, **metadata: str) -> list[str]:
    ids = []
    for _ in range(n):
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
        response = await api.http.post(
            "/v1/jobs",
            json={"endpoint": CHAT, "body": body, "metadata": metadata},
            headers=auth(key),
        )
        assert response.status_code == 202
        ids.append(response.json()["id"])
    return ids


async def bulk(api: Api, key: str, action: str, **request: Any) -> dict[str, Any]:
    response = await api.http.post(f"/v1/jobs/bulk_{action}", json=request, headers=auth(key))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["object"] == "bulk_action" and body["action"] == action
    return body


async def states(api: Api, ids: list[str]) -> set[JobState]:
    found = set()
    for job_id in ids:
        job = await api.runtime.storage.job_get(job_id=job_id)
        assert job is not None
        found.add(job.state)
    return found


async def test_a_tenant_key_acts_on_its_own_jobs_only(api: Api) -> None:
    acme, beta = await api.key("acme"), await api.key("beta")
    mine = await submit(api, acme, 3, batch="7")
    theirs = await submit(api, beta, 2, batch="7")

    dry = await bulk(api, acme, "cancel", where={"metadata": {"batch": "7"}}, dry_run=True)
    assert (dry["matched"], dry["changed"]) == (3, 0)
    assert await states(api, mine) == {JobState.QUEUED}
    for other in ("beta", "nobody"):  # another tenant's name matches none of a tenant key's jobs
        for dry_run in (True, False):
            refused = await api.http.post(
                "/v1/jobs/bulk_cancel",
                json={"where": {"tenant": other}, "dry_run": dry_run},
                headers=auth(acme),
            )
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["param"]) == ("tenant_outside_key", "where.tenant")
            assert "'acme'" in error["message"] and "operator key" in error["message"]
    own = await bulk(api, acme, "cancel", where={"tenant": "acme"}, dry_run=True)
    assert own["matched"] == 3
    done = await bulk(api, acme, "cancel", where={"metadata": {"batch": "7"}}, reason="oops")
    assert (done["changed"], done["has_more"]) == (3, False)
    assert await states(api, mine) == {JobState.CANCELLED}
    assert await states(api, theirs) == {JobState.QUEUED}
    events = (await api.http.get(f"/v1/jobs/{mine[0]}/events", headers=auth(acme))).json()
    assert (events["data"][-1]["actor"], events["data"][-1]["reason"]) == (
        "api:bulk",
        "bulk_cancel: oops",
    )


async def test_an_operator_acts_across_tenants_with_a_cursor(api: Api) -> None:
    acme, beta = await api.key("acme"), await api.key("beta")
    jobs = await submit(api, acme, 3) + await submit(api, beta, 2)
    operator_key = await api.runtime.operators.create("alice")

    assert (await bulk(api, operator_key, "delete", dry_run=True))["matched"] == 5
    first = await bulk(api, operator_key, "delete", limit=2, reason="cleanup")
    assert (first["changed"], first["has_more"]) == (2, True)
    rest = await bulk(api, operator_key, "delete", limit=10, after=first["last_id"])
    assert (rest["changed"], rest["has_more"]) == (3, False)
    assert await states(api, jobs) == {JobState.CANCELLED}
    for job_id in jobs:
        job = await api.runtime.storage.job_get(job_id=job_id)
        assert job is not None and job.request is None and job.purged_at is not None
    [last] = (await api.runtime.storage.job_events(job_id=jobs[0]))[-1:]
    assert (last.actor, last.reason) == ("operator:alice", "bulk_delete: cleanup")
    only_beta = await bulk(api, operator_key, "cancel", where={"tenant": "beta"}, dry_run=True)
    assert only_beta["matched"] == 0  # nothing live is left to cancel


async def test_bulk_needs_a_valid_key_and_a_valid_filter(api: Api) -> None:
    acme = await api.key("acme")
    whole = {"where": {"created_after": 21454.0}, "limit": 2308.0}  # integers to JSON Schema
    assert (await bulk(api, acme, "cancel", **whole))["changed"] == 0
    assert (await api.http.post("/v1/jobs/bulk_cancel", json={})).status_code == 401
    for bad in ("jgo_nope", "jg_nope"):
        response = await api.http.post("/v1/jobs/bulk_redrive", json={}, headers=auth(bad))
        assert response.status_code == 401
    for body in (
        {"where": {"status": ["sleeping"]}},
        {"where": {"colour": "red"}},
        {"limit": 0},
        {"reason": "x" * 201},
        {"where": {"metadata": {"k": 7}}},
        {"dry_run": 0},  # strict: not read as false (the action would run)
        {"where": {"created_after": "1764547200"}},
        {"limit": 2.5},
    ):
        response = await api.http.post("/v1/jobs/bulk_cancel", json=body, headers=auth(acme))
        assert response.status_code == 400, body
        assert response.headers["content-type"] == "application/problem+json"


async def test_a_bulk_cancel_stops_a_running_call(api: Api, scripted: ScriptedProvider) -> None:
    key = await api.key("acme")
    block = Block()
    scripted.script.append(block)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    request = {"endpoint": CHAT, "body": body, "provider": "scripted", "metadata": {"run": "1"}}
    running = (await api.http.post("/v1/jobs", json=request, headers=auth(key))).json()["id"]
    worker = api.runtime.worker()
    with api.runtime.storage.changes.on_cancel(worker.on_cancel_requested):
        work = asyncio.create_task(worker.run_once())
        await asyncio.wait_for(block.started.wait(), 5)
        done = await bulk(api, key, "cancel", where={"metadata": {"run": "1"}})
        assert done["changed"] == 1
        await asyncio.wait_for(work, 5)
    job = await api.runtime.storage.job_get(job_id=running)
    assert job is not None and job.state is JobState.CANCELLED
    assert job.cancel_outcome == "interrupted"
