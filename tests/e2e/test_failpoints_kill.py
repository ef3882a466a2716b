"""kill -9 at each failpoint, with real processes: separate api, worker and reaper processes on
PostgreSQL. Whatever the crash point, every accepted job ends exactly once (one terminal event,
one ledger row). The all-in-one process on SQLite gets the same treatment in test_scenarios
(restart while running; terminal result processing crashing halfway)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.support import (
    Api,
    assert_completed_once,
    create_tenant,
    job_body,
    wait_settled,
)
from tests.support import audit
from tests.support.processes import JobgateProcess, ProcessHarness, wait_until

pytestmark = pytest.mark.e2e

WORKER_POINTS = ["after_provider_response", "before_finish_commit", "after_finish_commit"]


def _wait_dead(process: JobgateProcess) -> None:
    wait_until(lambda: not process.alive, timeout_s=60, what=f"{process.name} to die")
    assert process.returncode == -9


@pytest.mark.postgres
def test_kill9_api_after_submit_commit_before_response_postgres(
    harness: ProcessHarness, pg_dsn: str
) -> None:
    harness.env["JOBGATE_DATABASE_URL"] = pg_dsn
    api = harness.start(
        "api", env={"JOBGATE_FAILPOINTS": "after_submit_commit_before_response=kill"}
    )
    harness.start("worker", ready=False)
    harness.start("reaper", ready=False)
    assert api.url is not None
    key = create_tenant(pg_dsn, "acme")
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "crash-1"}
    body = job_body("accepted, then the API died")
    with pytest.raises(httpx.TransportError):
        httpx.post(f"{api.url}/v1/jobs", json=body, headers=headers, timeout=30)
    _wait_dead(api)
    # The job committed before the crash: it runs although the client never heard of it.
    (job_id,) = audit.job_facts(pg_dsn)
    del api.env["JOBGATE_FAILPOINTS"]
    api.start().wait_ready()
    # The client retries with its key and learns the job's id; nothing is submitted twice.
    retried = httpx.post(f"{api.url}/v1/jobs", json=body, headers=headers, timeout=30)
    assert retried.status_code == 202 and retried.headers["Idempotent-Replayed"] == "true"
    assert retried.json()["id"] == job_id
    assert_completed_once(wait_settled(pg_dsn, [job_id]))
    assert len(audit.job_facts(pg_dsn)) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("point", WORKER_POINTS)
def test_kill9_worker_at_failpoint_postgres(
    harness: ProcessHarness, pg_dsn: str, point: str
) -> None:
    harness.env["JOBGATE_DATABASE_URL"] = pg_dsn
    api_process = harness.start("api")
    harness.start("reaper", ready=False)
    doomed = harness.start("worker", env={"JOBGATE_FAILPOINTS": f"{point}=kill"})
    assert api_process.url is not None
    api = Api(api_process.url, create_tenant(pg_dsn, "acme"))
    job_id = api.submit(job_body(f"killed at {point}"))
    _wait_dead(doomed)
    assert doomed.log_lines_matching(f"failpoint {point}: kill")
    harness.start("worker")
    facts = wait_settled(pg_dsn, [job_id])
    job = facts[job_id]
    if point == "after_finish_commit":
        # The verdict was committed: nothing to redo, and no reaper touches the job.
        assert job.claims == 1 and job.lost_count == 0
    else:
        assert job.claims == 2 and job.lost_count == 1  # the provider was called twice
    assert_completed_once(facts)


@pytest.mark.parametrize(
    "point", ["after_submit_commit_before_response", "after_provider_response"]
)
def test_kill9_serve_at_failpoint_sqlite(
    harness: ProcessHarness, tmp_path: Path, point: str
) -> None:
    """The all-in-one process on SQLite (before/after_finish_commit: test_scenarios)."""
    db_url = f"sqlite:///{tmp_path}/jobgate.db"
    harness.env["JOBGATE_DATABASE_URL"] = db_url
    serve = harness.start("serve", env={"JOBGATE_FAILPOINTS": f"{point}=kill"})
    assert serve.url is not None
    key = harness.default_api_key(serve.url)
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "crash-1"}
    body = job_body(f"killed at {point}")
    try:
        first = httpx.post(f"{serve.url}/v1/jobs", json=body, headers=headers, timeout=30)
        assert point == "after_provider_response" and first.status_code == 202
    except httpx.TransportError:
        assert point == "after_submit_commit_before_response"
    _wait_dead(serve)
    del serve.env["JOBGATE_FAILPOINTS"]
    serve.start().wait_ready()
    retried = httpx.post(f"{serve.url}/v1/jobs", json=body, headers=headers, timeout=30)
    assert retried.status_code == 202 and retried.headers["Idempotent-Replayed"] == "true"
    job_id = retried.json()["id"]
    facts = wait_settled(db_url, [job_id])
    assert_completed_once(facts)
    assert list(audit.job_facts(db_url)) == [job_id]
    assert facts[job_id].claims == (2 if point == "after_provider_response" else 1)
