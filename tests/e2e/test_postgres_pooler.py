"""An API process and a worker process whose every database call goes through PgBouncer in
transaction mode (JOBGATE_DATABASE_URL), each LISTENing on the direct URL
(JOBGATE_LISTEN_DATABASE_URL): jobs run, and the wake-ups stay immediate. The worker's poll
and the long poll's re-read are both 30 s here, so an answer within seconds is the NOTIFY's
doing: the worker hears of the submit, the API of the finish."""

from __future__ import annotations

import time

import pytest

from tests.e2e.support import Api, create_tenant, job_body
from tests.support import pgbouncer
from tests.support.processes import ProcessHarness

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def test_postgres_api_and_worker_through_pgbouncer_wake_at_once(
    harness: ProcessHarness, pg_dsn: str, pg_bouncer: pgbouncer.PgBouncer
) -> None:
    harness.env.update(
        JOBGATE_DATABASE_URL=pg_bouncer.dsn_for(pg_dsn),
        JOBGATE_LISTEN_DATABASE_URL=pg_dsn,
        JOBGATE_WORKER_POLL_INTERVAL_S="30",
    )
    api_process = harness.start("api")
    assert api_process.url is not None
    api = Api(api_process.url, create_tenant(pg_dsn, "acme"))
    harness.start("worker")
    # Warm-up: the worker's first claim may come from its start-up pass rather than a wake-up.
    first = api.client.post("/v1/jobs", json=job_body("warm up"), headers={"Prefer": "wait=25"})
    assert first.status_code == 200, first.text

    for n in range(5):
        started = time.monotonic()
        answered = api.client.post(
            "/v1/jobs", json=job_body(f"job {n}"), headers={"Prefer": "wait=25"}
        )
        took_s = time.monotonic() - started
        assert answered.status_code == 200, answered.text  # finished within the wait
        assert answered.json()["status"] == "succeeded"
        assert took_s < 10, f"job {n} answered after {took_s:.1f} s: a wake-up was missed"
        job_id = answered.json()["id"]
        assert [e["to"] for e in api.events(job_id)][-1] == "succeeded"
