"""`jobgate serve` on a database that already holds poison rows (written before the edge checked
values, or by hand) stays up, and stays up across a restart: the worker, the reaper and the
dispatcher each fail their poison alone (`poison_job`, dead-lettered), healthy work behind it
completes, every read of a poison job answers (never a 500), and a role that crashes is
restarted inside the process and counted in /metrics. Real processes, both backends."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobgate.domain.job import Job
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import sqlite_store_for_url
from jobgate.testing.receiver import WebhookReceiver
from tests.storage.helpers import new_job, submit_one
from tests.storage.poison_rows import far_future, json_text, poke
from tests.storage.webhook_helpers import make_endpoint
from tests.support.processes import JobgateProcess, ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

TERMINAL = {"succeeded", "failed", "cancelled", "expired"}


def _storage(url: str) -> Storage:
    if url.startswith("sqlite:"):
        return sqlite_store_for_url(url)
    return postgres_store(url, pool_size=2)


async def _seed(url: str, tenant_name: str, receiver_url: str) -> dict[str, str]:
    """Jobs as a database written by an older build (or by hand) may hold them."""
    storage = _storage(url)
    await storage.open()
    try:
        tenant = await storage.tenant_get(name=tenant_name)
        assert tenant is not None

        async def insert(**fields: Any) -> Job:
            return (await submit_one(storage, job=new_job(tenant, **fields))).job

        from jobgate.testing import FakeClock

        endpoint = await make_endpoint(storage, tenant, FakeClock(), url=receiver_url)
        await poke(storage, "webhook_endpoints", endpoint.id, secret="'whsec_%%not-base64'")
        # The reaper's: a lease that ran out on a job whose deadline no datetime can hold.
        lost = await insert(priority=0)
        [claimed] = await storage.job_claim(worker_id="gone", limit=1, lease_ttl_s=0.01)
        assert claimed.id == lost.id
        await poke(storage, "jobs", lost.id, deadline_at=far_future(storage))
        # The worker's: a timeout of 3e11 s (a claim used to store year 11533 and crash),
        # a deadline already past year 9999, a request that is not an object.
        huge = await insert(execution_timeout_s=3e11)
        stale = await insert()
        await poke(storage, "jobs", stale.id, deadline_at=far_future(storage))
        text = await insert()
        await poke(storage, "jobs", text.id, request=json_text(storage, '"just text"'))
        healthy = await insert(priority=9)
        return {
            "reaper": lost.id,
            "huge_timeout": huge.id,
            "worker_deadline": stale.id,
            "worker_request": text.id,
            "healthy": healthy.id,
            "endpoint": endpoint.id,
        }
    finally:
        await storage.close()


async def _poison_later(url: str, tenant_name: str) -> str:
    storage = _storage(url)
    await storage.open()
    try:
        tenant = await storage.tenant_get(name=tenant_name)
        assert tenant is not None
        job = (await submit_one(storage, job=new_job(tenant))).job
        await poke(storage, "jobs", job.id, request=json_text(storage, "[1, 2, 3]"))
        return job.id
    finally:
        await storage.close()


def _settled(http: httpx.Client, ids: list[str]) -> dict[str, dict[str, Any]]:
    answers: dict[str, dict[str, Any]] = {}

    def done() -> bool:
        for job_id in ids:
            response = http.get(f"/v1/jobs/{job_id}")
            assert response.status_code == 200, response.text
            answers[job_id] = response.json()
        return all(a["status"] in TERMINAL for a in answers.values())

    wait_until(done, timeout_s=60, interval_s=0.2, what="every seeded job to settle")
    return answers


def _metric(http: httpx.Client, name: str, role: str) -> float:
    text = http.get("/metrics").text
    match = re.search(rf'^{name}{{role="{role}"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def _assert_poisoned(job: dict[str, Any]) -> None:
    assert job["status"] == "failed" and job["dead_lettered"] is True, job
    assert job["error"]["code"] == "poison_job", job


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_serve_stays_up_on_poison_rows_and_across_a_restart(
    harness: ProcessHarness,
    receiver: WebhookReceiver,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'jobgate.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("pg_dsn")
    )
    harness.env.update({
        "JOBGATE_DATABASE_URL": url,
        "JOBGATE_METRICS_PUBLIC": "1",
        "JOBGATE_WEBHOOK_ALLOW_HTTP": "1",
        "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.0/8",
        "JOBGATE_WEBHOOK_RETRY_PROFILE": "short",
        # The reaper crashes the first time it starts: the process must restart it, not exit.
        "JOBGATE_FAILPOINTS": "role_run[reaper]=error@1",
    })  # fmt: skip
    key = harness.create_tenant("acme")
    seeded = asyncio.run(_seed(url, "acme", receiver.url))
    serve: JobgateProcess = harness.start("serve")
    assert serve.url is not None
    with httpx.Client(
        base_url=serve.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        jobs = [seeded[k] for k in seeded if k != "endpoint"]
        answers = _settled(http, jobs)
        for name in ("reaper", "worker_deadline", "worker_request"):
            _assert_poisoned(answers[seeded[name]])
        assert answers[seeded["healthy"]]["status"] == "succeeded"
        assert answers[seeded["huge_timeout"]]["status"] == "succeeded"  # clamped, not poison
        # Reads, lists and cancels of poison jobs answer.
        listed = http.get("/v1/jobs", params={"limit": 50})
        assert listed.status_code == 200 and len(listed.json()["data"]) == len(jobs)
        for name in ("reaper", "worker_deadline", "worker_request"):
            assert http.post(f"/v1/jobs/{seeded[name]}/cancel").status_code == 200
            assert http.get(f"/v1/jobs/{seeded[name]}/events").status_code == 200
        # The dispatcher's poison: an endpoint whose stored secret cannot sign.
        wait_until(
            lambda: _metric(http, "jobgate_poison_jobs_total", "dispatcher") >= 1,
            timeout_s=30,
            what="the poison delivery to fail alone",
        )
        assert _metric(http, "jobgate_poison_jobs_total", "worker") == 2
        assert _metric(http, "jobgate_poison_jobs_total", "reaper") == 1
        assert _metric(http, "jobgate_role_restarts_total", "reaper") == 1
        assert serve.alive
        records = serve.log_records()
        poisoned = [r for r in records if r.get("message") == "poison job failed alone"]
        assert {r["job_id"] for r in poisoned if r.get("role") != "dispatcher"} == {
            seeded["reaper"],
            seeded["worker_deadline"],
            seeded["worker_request"],
        }
        assert any("Traceback" in (r.get("traceback") or "") for r in records)
        assert "just text" not in serve.stdout() + serve.stderr()  # no stored content logged

    # A restart on the same database: up again, and a fresh poison row fails alone too.
    serve.terminate()
    later = asyncio.run(_poison_later(url, "acme"))
    serve.restart()
    assert serve.url is not None
    with httpx.Client(
        base_url=serve.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        fresh = http.post(
            "/v1/jobs",
            json={
                "endpoint": "/v1/chat/completions",
                "body": {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
            },
        )
        assert fresh.status_code == 202
        answers = _settled(http, [later, fresh.json()["id"]])
        _assert_poisoned(answers[later])
        assert answers[fresh.json()["id"]]["status"] == "succeeded"
        assert http.get(f"/v1/jobs/{seeded['worker_deadline']}").status_code == 200
        assert serve.alive
