"""Issue 2's real-process guarantees on PostgreSQL, with separate api, worker and reaper
processes: a worker killed mid-call, a frozen worker resumed after its job was reclaimed,
a graceful SIGTERM that gives leases back at once, and duplicated deliveries; the
scenarios that take `transport` run with every transport."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest

from tests.e2e.conftest import TransportUnderTest
from tests.e2e.support import (
    Api,
    assert_completed_once,
    create_tenant,
    job_body,
    wait_settled,
    wait_state,
)
from tests.support import audit
from tests.support.processes import FAST_ENV, ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _stack(harness: ProcessHarness, dsn: str, **env: str) -> Api:
    harness.env["JOBGATE_DATABASE_URL"] = dsn
    harness.env.update(env)
    api = harness.start("api")
    harness.start("reaper")
    assert api.url is not None
    return Api(api.url, create_tenant(dsn, "acme"))


def _published(dsn: str, ids: Sequence[str]) -> int:
    """How many of the jobs the transport relay published (none with `database`)."""

    async def count() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            query = "SELECT count(*) FROM transport_publications WHERE job_id = ANY($1::text[])"
            return int(await conn.fetchval(query, list(ids)))
        finally:
            await conn.close()

    return asyncio.run(count())


def _claimers(job: audit.JobFacts) -> list[str]:
    return [actor for src, dst, actor, _, applied in job.events if dst == "running" and applied]


def test_kill9_worker_mid_call_every_job_succeeds_once_postgres(
    harness: ProcessHarness, pg_dsn: str, transport_env: dict[str, str]
) -> None:
    api = _stack(harness, pg_dsn, **transport_env)
    doomed = harness.start("worker")
    ids = [api.submit(job_body(f"job {n}", latency_s=1.5)) for n in range(8)]
    wait_until(
        lambda: all(f.state == "running" for f in audit.job_facts(pg_dsn, ids).values()),
        what="the first worker to claim every job",
    )
    doomed.kill()
    harness.start("worker")

    facts = wait_settled(pg_dsn, ids)
    assert_completed_once(facts)
    for job in facts.values():
        # Reclaimed by the reaper once the dead worker's lease expired, then run again.
        assert (
            "running",
            "queued",
            "reaper",
            "worker_lost",
            True,
        ) in job.events, job.events
        assert job.claims == 2 and job.lost_count == 1
    # The jobs came through the broker (or, with `database`, never touched one).
    assert _published(pg_dsn, ids) == (len(ids) if transport_env else 0)
    sample = api.get(ids[0])["result"]["choices"][0]["message"]["content"]
    assert sample == "echo: job 0"


def test_sigstopped_worker_resumed_after_reclaim_writes_nothing_postgres(
    harness: ProcessHarness, pg_dsn: str, transport_env: dict[str, str]
) -> None:
    api = _stack(harness, pg_dsn, **transport_env)
    frozen = harness.start("worker")
    job_id = api.submit(job_body("slow", latency_s=2.0))
    wait_state(pg_dsn, job_id, ["running"])
    frozen.freeze()
    try:
        rescuer = harness.start("worker")
        facts = wait_settled(pg_dsn, [job_id])
    finally:
        frozen.thaw()
    first, second = _claimers(facts[job_id])
    # The frozen worker wakes with a lease it can no longer renew: it stops and drops.
    wait_until(
        lambda: frozen.log_lines_matching("lease about to expire|lease lost; result dropped"),
        what="the resumed worker to notice it lost its lease",
    )
    job = audit.job_facts(pg_dsn, [job_id])[job_id]
    assert_completed_once({job_id: job})
    winner = [e for e in job.events if e[1] == "succeeded" and e[4]]
    assert winner[0][2] == second != first
    reclaimed_at = job.events.index(("running", "queued", "reaper", "worker_lost", True))
    assert all(event[2] != first for event in job.events[reclaimed_at:])
    assert frozen.alive and rescuer.alive
    # The resumed worker is healthy: it goes on to run new work.
    rescuer.kill()
    again = api.submit(job_body("after the thaw"))
    done = wait_settled(pg_dsn, [again])
    assert _claimers(done[again]) == [first]


def test_sigstopped_worker_fenced_at_commit_records_an_ignored_event_postgres(
    harness: ProcessHarness, pg_dsn: str
) -> None:
    api = _stack(harness, pg_dsn)
    # The sleep holds the worker just before it commits its verdict, long enough for the test
    # to freeze it there; it resumes only after another worker has finished the job.
    stale = harness.start("worker", env={"JOBGATE_FAILPOINTS": "before_finish_commit=sleep:3"})
    job_id = api.submit(job_body("fenced"))
    wait_until(
        lambda: stale.log_lines_matching("failpoint before_finish_commit"),
        what="the worker to reach its commit",
    )
    stale.freeze()
    try:
        harness.start("worker")
        wait_settled(pg_dsn, [job_id])
    finally:
        stale.thaw()
    job = wait_until(
        lambda: (f := audit.job_facts(pg_dsn, [job_id])[job_id]).ignored_events and f,
        what="the stale worker's fenced write to be recorded",
    )
    first, second = _claimers(job)
    ignored = [e for e in job.events if not e[4]]
    assert ignored == [("succeeded", "succeeded", first, "lease_lost", False)]
    assert_completed_once({job_id: job})
    assert [e[2] for e in job.events if e[1] == "succeeded" and e[4]] == [second]
    assert stale.log_lines_matching("lease lost; result dropped")
    assert api.get(job_id)["status"] == "succeeded"


def test_graceful_sigterm_releases_leases_at_once_postgres(
    harness: ProcessHarness, pg_dsn: str, transport_env: dict[str, str]
) -> None:
    # A long lease: without the release, the jobs would wait 60 s for the reaper.
    api = _stack(
        harness, pg_dsn, JOBGATE_LEASE_TTL_S="60", JOBGATE_HEARTBEAT_INTERVAL_S="1",
        JOBGATE_SHUTDOWN_GRACE_S="0.3", **transport_env,
    )  # fmt: skip
    leaving = harness.start("worker")
    ids = [api.submit(job_body(f"job {n}", latency_s=3)) for n in range(3)]
    wait_until(
        lambda: all(f.state == "running" for f in audit.job_facts(pg_dsn, ids).values()),
        what="every job to be claimed",
    )
    assert leaving.terminate(timeout_s=30) == 0
    released = audit.job_facts(pg_dsn, ids)
    for job in released.values():
        # Back in the queue the moment the worker left, the attempt not counted.
        assert job.state == "queued", job.events
        assert job.events[-1][1:4] == ("queued", _claimers(job)[0], "worker_shutdown")
        assert job.attempt == 0
    harness.start("worker")
    facts = wait_settled(pg_dsn, ids)
    assert_completed_once(facts)
    assert all(job.attempt == 1 and job.lost_count == 0 for job in facts.values())


def test_duplicate_deliveries_run_each_job_once_postgres(
    harness: ProcessHarness, pg_dsn: str, transport: TransportUnderTest
) -> None:
    """Every "job ready" message delivered three times (two copies published straight to the
    broker before the workers start, then the relay's), and three more once the jobs have all
    finished: each job is claimed once, runs once and ends once; the copies are acked and
    dropped. With `database` there is no message to copy: the same load is the baseline."""
    api = _stack(harness, pg_dsn, **transport.env)
    ids = [api.submit(job_body(f"job {n}", latency_s=0.5)) for n in range(20)]
    _publish_again(transport, ids, times=2)  # before any worker (and its relay) runs
    harness.start("worker")
    harness.start("worker")
    facts = wait_settled(pg_dsn, ids)
    assert_completed_once(facts)
    assert all(job.claims == 1 and job.run_count == 1 for job in facts.values())
    _publish_again(transport, ids, times=3)  # for jobs that have ended
    if transport.broker is not None:
        wait_until(lambda: _lag(transport) == 0, timeout_s=60, what="the copies to be dropped")
    after = audit.job_facts(pg_dsn, ids)
    assert after == facts  # nothing moved: no claim, event, ledger or outbox row more
    if transport.broker is not None:
        assert _published(pg_dsn, ids) == len(ids)


# As the workers declare their queues (an SQS queue created with other attributes is refused).
LEASE_TTL_S = float(FAST_ENV["JOBGATE_LEASE_TTL_S"])


def _publish_again(transport: TransportUnderTest, ids: Sequence[str], *, times: int) -> None:
    if transport.broker is None:
        return
    client = transport.broker.transport("duplicator", claim_idle_s=LEASE_TTL_S)

    async def publish() -> None:
        await client.open()
        try:
            for _ in range(times):
                await client.publish(list(ids))
        finally:
            await client.close()

    asyncio.run(publish())


def _lag(transport: TransportUnderTest) -> int:
    assert transport.broker is not None
    client = transport.broker.transport("observer", claim_idle_s=LEASE_TTL_S)

    async def lag() -> int:
        await client.open()
        try:
            return await client.lag()
        finally:
            await client.close()

    return asyncio.run(lag())
