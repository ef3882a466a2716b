"""Two reapers at once, workers and reapers with clocks skewed by ten minutes, and a poison job
that kills every worker that runs it: real processes on PostgreSQL."""

from __future__ import annotations

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

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _api(harness: ProcessHarness, dsn: str) -> Api:
    harness.env["JOBGATE_DATABASE_URL"] = dsn
    api = harness.start("api")
    assert api.url is not None
    return Api(api.url, create_tenant(dsn, "acme"))


def _all_running(dsn: str, ids: list[str]) -> bool:
    return all(f.state == "running" for f in audit.job_facts(dsn, ids).values())


def test_two_reapers_at_once_reclaim_each_lease_once_postgres(
    harness: ProcessHarness, pg_dsn: str
) -> None:
    api = _api(harness, pg_dsn)
    fast = {"JOBGATE_REAPER_INTERVAL_S": "0.1"}
    reapers = [harness.start("reaper", env=fast, ready=False) for _ in range(2)]
    doomed = harness.start("worker")
    ids = [api.submit(job_body(f"job {n}", latency_s=2)) for n in range(12)]
    wait_until(lambda: _all_running(pg_dsn, ids), what="every job to be claimed")
    doomed.kill()
    harness.start("worker")
    facts = wait_settled(pg_dsn, ids)
    assert_completed_once(facts)
    for job in facts.values():
        reclaims = [e for e in job.events if e[2] == "reaper"]
        assert reclaims == [("running", "queued", "reaper", "worker_lost", True)], job.events
    assert all(reaper.alive for reaper in reapers)
    reaped = sum(len(r.log_lines_matching('"reason":"worker_lost"')) for r in reapers)
    assert reaped == len(ids)  # between them, each lease reclaimed exactly once


@pytest.mark.parametrize("skew_s", [600, -600], ids=["ahead", "behind"])
def test_clock_skewed_ten_minutes_lease_math_uses_database_clock_postgres(
    harness: ProcessHarness, pg_dsn: str, skew_s: int
) -> None:
    api = _api(harness, pg_dsn)
    skewed = {"JOBGATE_TEST_CLOCK_OFFSET_S": str(skew_s)}
    harness.start("reaper", env=skewed, ready=False)
    first = harness.start("worker", env=skewed)
    # An execution deadline shorter than the skew: a worker trusting its own clock would
    # call it exceeded at once (ahead); a reaper trusting its own would reclaim every live
    # lease (ahead) or never reclaim a dead worker's (behind).
    body = job_body("skewed", latency_s=1.5)
    body["execution_timeout_s"] = 120
    ids = [api.submit(body) for _ in range(4)]
    facts = wait_settled(pg_dsn, ids)
    assert_completed_once(facts)
    assert all(job.claims == 1 and job.lost_count == 0 for job in facts.values())

    lost = [api.submit(body) for _ in range(2)]
    wait_until(lambda: _all_running(pg_dsn, lost), what="the jobs to be claimed")
    first.kill()
    harness.start("worker", env=skewed)
    facts = wait_settled(pg_dsn, lost)
    assert_completed_once(facts)
    assert all(job.claims == 2 and job.lost_count == 1 for job in facts.values())


def test_poison_job_fails_worker_lost_repeatedly_without_crash_looping_postgres(
    harness: ProcessHarness, pg_dsn: str
) -> None:
    api = _api(harness, pg_dsn)
    harness.env.update({
        "JOBGATE_LEASE_TTL_S": "1.5",
        "JOBGATE_HEARTBEAT_INTERVAL_S": "0.3",
        "JOBGATE_MAX_ATTEMPTS": "3",
        "JOBGATE_WORKER_CONCURRENCY": "1",
        # Any worker that starts the poison job dies on the spot.
        "JOBGATE_FAILPOINTS": "before_provider_call[sim-poison]=kill",
    })  # fmt: skip
    harness.start("reaper", ready=False)
    workers: list[JobgateProcess] = [harness.start("worker", ready=False) for _ in range(2)]
    poison = api.submit(job_body("poison", model="sim-poison"))
    healthy = [api.submit(job_body(f"fine {n}", latency_s=0.2)) for n in range(6)]
    deaths = 0

    def supervise() -> bool:
        """Restart dead workers, as systemd or Kubernetes would; done when all jobs are."""
        nonlocal deaths
        for worker in workers:
            if worker.popen is not None and worker.returncode is not None:
                assert worker.returncode == -9, worker.tail()
                deaths += 1
                worker.start()
        facts = audit.job_facts(pg_dsn, [poison, *healthy])
        return all(f.terminal for f in facts.values())

    wait_until(supervise, timeout_s=120, interval_s=0.1, what="the poison job to be given up")
    job = audit.job_facts(pg_dsn, [poison])[poison]
    assert job.state == "failed" and job.dead_lettered
    assert job.error_code == "worker_lost_repeatedly"
    assert job.claims == 3 and job.terminal_events == 1
    assert deaths == 3  # one per attempt, then no more: the pool does not crash-loop
    assert_completed_once(audit.job_facts(pg_dsn, healthy))
    after = [api.submit(job_body(f"after {n}")) for n in range(3)]
    assert_completed_once(wait_settled(pg_dsn, after))
    assert all(worker.alive for worker in workers) and deaths == 3
    assert api.get(poison)["error"]["code"] == "worker_lost_repeatedly"
