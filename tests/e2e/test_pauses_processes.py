"""Pauses with real processes on PostgreSQL: a pause made through one API process holds every
worker process at once and survives their restarts; queued jobs wait (`paused`) with no attempt
spent, a running job finishes, and a resume wakes the workers to claim them all. (A job a
stopping worker gives back is queued again, and then held like the others.)"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.e2e.support import Api, create_tenant, job_body, wait_settled
from tests.support.processes import ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def test_a_pause_holds_every_worker_until_resumed(harness: ProcessHarness, pg_dsn: str) -> None:
    harness.env.update(JOBGATE_DATABASE_URL=pg_dsn)
    api_process = harness.start("api")
    assert api_process.url is not None
    api = Api(api_process.url, create_tenant(pg_dsn, "acme"))
    operator_key = json.loads(harness.run("operators", "create", "ops", "--json").stdout)[
        "operator_key"
    ]
    operator = httpx.Client(
        base_url=api_process.url, headers={"Authorization": f"Bearer {operator_key}"}, timeout=30
    )
    try:
        _pause_and_resume(harness, pg_dsn, api, operator)
    finally:
        operator.close()


def _pause_and_resume(
    harness: ProcessHarness, pg_dsn: str, api: Api, operator: httpx.Client
) -> None:
    workers = [harness.start("worker", name=f"worker-{n}") for n in range(2)]

    # A running call when the pause comes: it finishes.
    running = api.submit(job_body("slow", latency_s=3))
    wait_until(lambda: api.get(running)["status"] == "running", timeout_s=30, what="a claim")
    created = operator.post("/v1/pauses", json={"provider": "sim", "reason": "incident"})
    assert created.status_code == 201, created.text
    pause_id = created.json()["id"]
    held = [api.submit(job_body(f"held {n}")) for n in range(6)]

    wait_settled(pg_dsn, [running], timeout_s=30)
    assert api.get(running)["status"] == "succeeded"
    for worker in workers:  # restarted workers read the same pause
        worker.terminate()
        worker.start().wait_ready()
    time.sleep(2)  # several claim passes of both workers
    for job_id in held:
        job = api.get(job_id)
        assert job["status"] == "queued" and job["attempt"] == 0, job
        assert job["waiting"]["reason"] == "paused" and pause_id in job["waiting"]["detail"]

    resumed = operator.delete(f"/v1/pauses/{pause_id}")
    assert resumed.status_code == 200 and resumed.json()["deleted"] is True
    wait_settled(pg_dsn, held, timeout_s=30)
    for job_id in held:
        job = api.get(job_id)
        assert (job["status"], job["attempt"]) == ("succeeded", 1)
    for worker in workers:
        assert worker.alive
