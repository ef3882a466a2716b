"""`queue_position` is counted on every status read of a queued job, so the count is bounded:
at most ranges.QUEUE_POSITION_COUNTED jobs ahead are counted (60 ms per read at 100,000 ahead
before), and a job farther back reads one more than that. A status read (`job_status`) reads
the job and its place in one statement, with the same answers. Both backends."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from jobgate.domain import ranges, verdicts
from jobgate.domain.job import NewJob
from jobgate.domain.states import JobState
from jobgate.storage.postgres.executor import Q as PG
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from jobgate.storage.sqlite.executor import Q as SQ
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_many, make_tenant, new_job, submit_one
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
        await submit_one(storage, job=job, now=clock.now())
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
        await submit_one(storage, job=job, now=now)
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
    """PostgreSQL: the count is a function called for a queued job only (migration 0053). As
    an inline subquery it was a subplan that every status read initialised (an index scan on
    jobs_claimable opened for a finished job too: ~15 us of backend CPU per read)."""
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage)
        queued, done = await insert_many(storage, jobs=[new_job(tenant), new_job(tenant)])
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
                assert row["queue_place"] == position
        finally:
            await conn.close()
    finally:
        await storage.close()


async def _places(storage: Storage, jobs: list[NewJob], now: datetime) -> list[tuple[int, bool]]:
    """(queue_position, queue_position_exact) of each job's status read."""
    places = []
    for job in jobs:
        status = await storage.job_status(job_id=job.id, tenant_id=job.tenant_id, now=now)
        assert status is not None and status.wait is not None
        assert status.queue_position == status.wait.queue_position
        assert status.queue_position_exact == status.wait.queue_position_exact
        assert status.queue_position is not None
        places.append((status.queue_position, status.queue_position_exact))
    return places


async def test_a_place_is_exact_below_the_bound_and_a_floor_beyond_it(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At most QUEUE_POSITION_COUNTED entries of the line ahead are walked: a job with fewer
    ahead has its exact place; one farther back reads bound + 1, marked not exact ("4+")."""
    monkeypatch.setattr(ranges, "QUEUE_POSITION_COUNTED", 3)
    tenant = await make_tenant(storage)
    now = clock.now()
    jobs = [new_job(tenant, priority=5) for _ in range(5)]
    await insert_many(storage, jobs=jobs, now=now)
    assert await _places(storage, jobs, now) == [
        (1, True),
        (2, True),
        (3, True),
        (4, False),
        (4, False),
    ]
    # The list's wait reads (job_wait_facts) answer the same places.
    reads = await storage.job_wait_facts(
        tenant_id=tenant.id,
        job_ids=[job.id for job in jobs],
        count_running=False,
        count_keys=False,
        count_positions=True,
        now=now,
    )
    assert [(reads[j.id].queue_position, reads[j.id].queue_position_exact) for j in jobs] == [
        (1, True),
        (2, True),
        (3, True),
        (4, False),
        (4, False),
    ]


async def test_first_is_first_only_when_the_walk_saw_the_whole_line_ahead(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs ahead in claim order that are not claimable yet (run_at to come) are walked but not
    counted: when they fill the walk, the job reads 1 but not exact, never "first"."""
    monkeypatch.setattr(ranges, "QUEUE_POSITION_COUNTED", 3)
    tenant = await make_tenant(storage)
    now = clock.now()
    later = [new_job(tenant, priority=0, run_at=now + timedelta(hours=1)) for _ in range(3)]
    job = new_job(tenant, priority=5)
    await insert_many(storage, jobs=[*later, job], now=now)
    assert await _places(storage, [job], now) == [(1, False)]
    monkeypatch.setattr(ranges, "QUEUE_POSITION_COUNTED", 4)  # the walk sees the whole line
    assert await _places(storage, [job], now) == [(1, True)]
    await insert_many(storage, jobs=[new_job(tenant, priority=0)], now=now)  # one claimable ahead
    assert await _places(storage, [job], now) == [(2, False)]


async def _queue(storage: Storage, tenant: Tenant, size: int) -> list[NewJob]:
    jobs = [new_job(tenant, priority=5) for _ in range(size)]
    for start in range(0, size, 500):
        await insert_many(storage, jobs=jobs[start : start + 500])
    return jobs


@pytest.mark.postgres
async def test_a_status_read_walks_a_bounded_part_of_the_line_postgres(pg_dsn: str) -> None:
    """PostgreSQL: the place is a backward index-only walk from the job, at most :counted
    entries of jobs_claimable (the index tuples the transaction read from it, as its statistics
    count them),
    whatever the backlog behind the job. The forward count it replaces walked every job of the
    tenant's priority behind the first one (a row comparison is a scan bound on its first
    column only), ~50 ms at 1,000,000 queued."""
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage)
        jobs = await _queue(storage, tenant, 1_000)
        conn = await asyncpg.connect(pg_dsn)
        try:
            # The plan the function settles on after five calls (a custom plan's planning
            # reads the index's ends too), planned before the reads counted.
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            status = PG["job_status_for_tenant"]
            for job in (jobs[0], jobs[1], jobs[500], jobs[-1]):
                params = {"id": job.id, "tenant_id": tenant.id, "now": None, "counted": 3}
                await conn.fetch(status.positional_sql, *status.args(params))
                fetched = "SELECT pg_stat_get_xact_blocks_fetched('jobs_claimable'::regclass)"
                async with conn.transaction():  # counts not yet reported: read before and after
                    before = await conn.fetchval(fetched)
                    (row,) = await conn.fetch(status.positional_sql, *status.args(params))
                    read = await conn.fetchval(fetched) - before
                assert read <= 3, (job.id, read)  # its root, the leaf it starts on, the next
                assert row["queue_place"] == (1 if job is jobs[0] else 2 if job is jobs[1] else -4)
        finally:
            await conn.close()
    finally:
        await storage.close()


async def test_a_status_read_runs_the_same_steps_whatever_the_backlog_sqlite(
    tmp_path: Path, clock: FakeClock
) -> None:
    """SQLite: a status read of a queued job runs the same number of VM instructions behind 10
    and behind 1,000 queued jobs (counted by a progress handler: no timing)."""
    steps = []
    for size in (10, 1_000):
        path = tmp_path / f"q{size}.db"
        store = sqlite_store(str(path), clock=clock)
        await store.open()
        await store.migrate()
        try:
            tenant = await make_tenant(store)
            jobs = await _queue(store, tenant, size)
        finally:
            await store.close()
        conn = sqlite3.connect(path)
        try:
            for job in (jobs[0], jobs[5]):
                counter = [0]

                def step(counter: list[int] = counter) -> int:
                    counter[0] += 1
                    return 0

                conn.set_progress_handler(step, 1)
                params = {
                    "id": job.id,
                    "tenant_id": tenant.id,
                    "now": clock.now().timestamp(),
                    "counted": 3,
                }
                conn.execute(SQ["job_status_for_tenant"].sql, params).fetchall()
                steps.append(counter[0])
        finally:
            conn.close()
    assert steps[:2] == steps[2:], steps
