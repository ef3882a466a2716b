"""`queue_position` is counted on every status read of a queued job, so the count is bounded:
at most ranges.QUEUE_POSITION_COUNTED jobs ahead are counted (60 ms per read at 100,000 ahead
before), and a job farther back reads one more than that. A status read (`job_status`) reads
the job and its place in one statement, with the same answers. Both backends."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from jobgate.domain import ranges, verdicts
from jobgate.domain.states import JobState
from jobgate.storage.postgres.executor import Q as PG
from jobgate.storage.postgres.store import PostgresStorage
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job
from tests.storage.pg_plans import PLAN_MODES, explained, nodes

pytestmark = pytest.mark.asyncio


async def test_the_count_ahead_stops_at_its_bound(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranges, "QUEUE_POSITION_COUNTED", 3)
    tenant = await make_tenant(storage)
    jobs = [new_job(tenant, priority=5) for _ in range(6)]
    urgent = new_job(tenant, priority=1)
    for job in [*jobs, urgent]:
        await storage.job_insert(job=job, now=clock.now())
    positions = []
    for job in [urgent, *jobs]:
        stored = await storage.job_get(job_id=job.id)
        assert stored is not None
        positions.append(await storage.job_queue_position(job=stored, now=clock.now()))
    assert positions == [1, 2, 3, 4, 4, 4, 4]


async def test_a_status_read_answers_the_view_and_the_place_together(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranges, "QUEUE_POSITION_COUNTED", 3)
    tenant = await make_tenant(storage)
    other = await make_tenant(storage, "other")
    now = clock.now()
    ahead = [new_job(tenant, priority=5) for _ in range(5)]
    later = new_job(tenant, priority=0, run_at=now + timedelta(hours=1))  # not claimable yet
    foreign = new_job(other, priority=0)  # another tenant's line
    for job in [*ahead, later, foreign]:
        await storage.job_insert(job=job, now=now)
    for job in [*ahead, later, foreign]:
        owner = other.id if job is foreign else tenant.id
        status = await storage.job_status(job_id=job.id, tenant_id=owner, now=now)
        assert status is not None
        assert status.job == await storage.job_view(job_id=job.id, tenant_id=owner)
        stored = await storage.job_get(job_id=job.id)
        assert stored is not None
        expected = await storage.job_queue_position(job=stored, now=now)
        assert status.queue_position == expected, job.id
    positions = [
        (await storage.job_status(job_id=j.id, tenant_id=tenant.id, now=now)).queue_position  # type: ignore[union-attr]
        for j in ahead
    ]
    assert positions == [1, 2, 3, 4, 4]  # at most 3 counted ahead
    assert await storage.job_status(job_id=ahead[0].id, tenant_id=other.id, now=now) is None
    assert await storage.job_status(job_id="job_unknown", tenant_id=tenant.id, now=now) is None

    # A job out of the queue has no place: running, then finished.
    (claimed,) = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=now)
    running = await storage.job_status(job_id=claimed.id, tenant_id=claimed.tenant_id, now=now)
    assert running is not None and running.job.state is JobState.RUNNING
    assert running.queue_position is None
    done = verdicts.succeeded(claimed, actor="w", result={"ok": True}, usage={})
    await storage.job_finish_many(finishes=[done], now=now)
    finished = await storage.job_status(job_id=claimed.id, tenant_id=claimed.tenant_id, now=now)
    assert finished is not None and finished.job.state is JobState.SUCCEEDED
    assert finished.queue_position is None


@pytest.mark.postgres
@pytest.mark.parametrize("mode", PLAN_MODES)
async def test_a_status_read_plans_no_count_for_a_job_that_is_not_queued(
    pg_dsn: str, mode: str
) -> None:
    """PostgreSQL: the count is a function called for a queued job only (migration 0029). As
    an inline subquery it was a subplan that every status read initialised (an index scan on
    jobs_claimable opened for a finished job too: ~15 us of backend CPU per read)."""
    storage = PostgresStorage(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage)
        queued, done = await storage.job_insert_many(jobs=[new_job(tenant), new_job(tenant)])
        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute("UPDATE jobs SET state = 'succeeded' WHERE id = $1", done.id)
            for job, position in ((done, None), (queued, 1)):
                params = {"id": job.id, "tenant_id": tenant.id, "now": None, "counted": 1_000}
                plan = await explained(conn, "job_status_for_tenant", params, mode)
                # One node, the job's own read: no subplan beside it, taken or not.
                assert [n.get("Relation Name") for n in nodes(plan)] == ["jobs"], plan
                (row,) = await conn.fetch(
                    PG["job_status_for_tenant"].positional_sql,
                    *PG["job_status_for_tenant"].args(params),
                )
                assert row["queue_position"] == position
        finally:
            await conn.close()
    finally:
        await storage.close()
