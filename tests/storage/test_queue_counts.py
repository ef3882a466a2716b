"""The operator's counts of queued jobs (admin_overview, console_queue_depth, queued_wait_groups)
are read at each console refresh and /metrics scrape, so they are bounded like the status
read's place in line: at most ranges.QUEUE_COUNTED jobs of each tenant's line are walked, from
its head in claim order, and a longer line reads a floor (`exact` False). Both backends: the
answers, then what each read walks (PostgreSQL: the tuples it reads; SQLite: the VM steps)."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from jobgate.domain import ranges
from jobgate.domain.job import NewJob
from jobgate.storage.postgres.executor import Q as PG
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from jobgate.storage.sqlite.executor import Q as SQ
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_many, make_tenant, new_job

pytestmark = pytest.mark.asyncio

READS = ("admin_overview", "console_queue_depth", "queued_wait_groups")


async def test_counts_are_exact_below_the_bound_and_floors_beyond_it(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant with more queued jobs than the walk reads the bound, marked not exact, split
    by provider as the head of its line is (claim order: priority, run_at, id); a tenant
    with fewer reads its exact counts."""
    monkeypatch.setattr(ranges, "QUEUE_COUNTED", 3)
    deep = await make_tenant(storage, "deep")
    shallow = await make_tenant(storage, "shallow")
    now = clock.now()
    head = [new_job(deep, priority=1, provider="openai"), new_job(deep, priority=2)]
    behind = [new_job(deep, priority=5) for _ in range(2)]
    behind.append(new_job(deep, priority=7, provider="openai"))
    few = [new_job(shallow), new_job(shallow, provider="openai")]
    await insert_many(storage, jobs=[*behind, *head, *few], now=now)

    overview = {row.tenant_name: row for row in await storage.admin_overview(now=now)}
    assert (overview["deep"].queued, overview["deep"].queued_exact) == (3, False)
    assert (overview["shallow"].queued, overview["shallow"].queued_exact) == (2, True)

    depth = {
        (d.tenant_id, d.provider): (d.queued, d.exact) for d in await storage.console_queue_depth()
    }
    assert depth == {
        (deep.id, "openai"): (1, False),  # the head: priority 1 (openai), 2 and 5 (sim)
        (deep.id, "sim"): (2, False),
        (shallow.id, "sim"): (1, True),
        (shallow.id, "openai"): (1, True),
    }

    groups = await storage.queued_wait_groups(keys=False, capped_tenants=[], limit=10, now=now)
    by_group = {(g.tenant_id, g.provider): (g.queued, g.exact) for g in groups}
    assert by_group == depth


async def test_an_empty_line_and_a_line_of_exactly_the_bound(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line as long as the walk cannot be told from a longer one: it reads a floor, never
    an exact count that might be short. An empty line reads 0, exact."""
    monkeypatch.setattr(ranges, "QUEUE_COUNTED", 3)
    full = await make_tenant(storage, "full")
    await make_tenant(storage, "empty")
    await insert_many(storage, jobs=[new_job(full) for _ in range(3)], now=clock.now())
    overview = {row.tenant_name: row for row in await storage.admin_overview(now=clock.now())}
    assert (overview["full"].queued, overview["full"].queued_exact) == (3, False)
    assert (overview["empty"].queued, overview["empty"].queued_exact) == (0, True)
    [depth] = await storage.console_queue_depth()
    assert (depth.queued, depth.exact) == (3, False)


async def test_the_longest_wait_is_the_earliest_come_run_at_of_any_priority(
    storage: Storage, clock: FakeClock
) -> None:
    """oldest_due_at probes each priority's line for its earliest come run_at: a job at the
    back of the claim order (priority 9) waiting longest is found, a job not come yet is not."""
    tenant = await make_tenant(storage)
    start = clock.now()
    await insert_many(storage, jobs=[new_job(tenant, priority=9)], now=start)
    clock.advance(60)
    now = clock.now()
    await insert_many(
        storage,
        jobs=[
            new_job(tenant, priority=0),
            new_job(tenant, priority=4, run_at=now - timedelta(seconds=30)),
            new_job(tenant, priority=0, run_at=now + timedelta(hours=1)),  # not come
        ],
        now=now,
    )
    [row] = await storage.admin_overview(now=now)
    assert (row.queued, row.queued_exact, row.oldest_due_at) == (4, True, start)


def _params(*, postgres: bool, now: Any, counted: int) -> dict[str, Any]:
    """Every read's parameters, as each dialect's codec passes them (JSON: a value on
    PostgreSQL, text on SQLite)."""
    priorities = list(range(ranges.PRIORITY_MIN, ranges.PRIORITY_MAX + 1))
    return {
        "now": now,
        "counted": counted,
        "priorities": str(priorities),  # JSON text (the raw connection has no jsonb codec)
        "keys": False,
        "capped_tenants": [] if postgres else "[]",
        "limit": 1_000,
    }


async def _queue(storage: Storage, tenant: Tenant, size: int) -> list[NewJob]:
    jobs = [new_job(tenant, priority=5) for _ in range(size)]
    for start in range(0, size, 500):
        await insert_many(storage, jobs=jobs[start : start + 500])
    return jobs


_READ_FROM_JOBS = """
SELECT coalesce(sum(pg_stat_get_xact_tuples_fetched(c.oid)
                    + pg_stat_get_xact_tuples_returned(c.oid)), 0)::bigint
  FROM pg_class AS c
 WHERE c.oid = 'jobs'::regclass
    OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'jobs'::regclass)
"""


@pytest.mark.postgres
async def test_each_count_reads_a_bounded_part_of_the_line_postgres(pg_dsn: str) -> None:
    """PostgreSQL: each read fetches at most a few tuples per walked entry from `jobs` and its
    indexes (as the transaction's statistics count them), whatever the backlog: the same
    with 2,000 and with 4,000 queued jobs, at most two per entry walked and one per priority
    probed. The counts they replace read every queued row."""
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage)
        conn = await asyncpg.connect(pg_dsn)
        try:
            read_at: dict[int, list[int]] = {}
            for size in (2_000, 4_000):
                await _queue(storage, tenant, 2_000)
                await conn.execute("ANALYZE jobs")
                read_at[size] = await _tuples_read(conn, counted=5)
            assert read_at[2_000] == read_at[4_000], read_at
            assert max(read_at[4_000]) <= 5 * 2 + 10, read_at
        finally:
            await conn.close()
    finally:
        await storage.close()


async def _tuples_read(conn: asyncpg.Connection, *, counted: int) -> list[int]:
    read = []
    for name in READS:
        query = PG[name]
        params = _params(postgres=True, now=None, counted=counted)
        await conn.fetch(query.positional_sql, *query.args(params))  # planned before counting
        async with conn.transaction():  # counts not yet reported: read before and after
            before = await conn.fetchval(_READ_FROM_JOBS)
            rows = await conn.fetch(query.positional_sql, *query.args(params))
            read.append(await conn.fetchval(_READ_FROM_JOBS) - before)
        assert rows, name
    return read


async def test_each_count_runs_the_same_steps_whatever_the_backlog_sqlite(
    tmp_path: Path, clock: FakeClock
) -> None:
    """SQLite: each read runs the same number of VM instructions behind 10 and behind 1,000
    queued jobs (counted by a progress handler: no timing)."""
    steps: dict[int, list[int]] = {}
    for size in (10, 1_000):
        path = tmp_path / f"q{size}.db"
        store = sqlite_store(str(path), clock=clock)
        await store.open()
        await store.migrate()
        try:
            tenant = await make_tenant(store)
            await _queue(store, tenant, size)
        finally:
            await store.close()
        conn = sqlite3.connect(path)
        try:
            steps[size] = _steps(conn, clock.now().timestamp())
        finally:
            conn.close()
    assert steps[10] == steps[1_000], steps


def _steps(conn: sqlite3.Connection, now: float) -> list[int]:
    counted = []
    for name in READS:
        counter = [0]

        def step(counter: list[int] = counter) -> int:
            counter[0] += 1
            return 0

        conn.set_progress_handler(step, 1)
        rows = conn.execute(SQ[name].sql, _params(postgres=False, now=now, counted=5)).fetchall()
        conn.set_progress_handler(None, 1)
        assert rows, name
        counted.append(counter[0])
    return counted


@pytest.mark.postgres
async def test_jobgate_sessions_never_compile_a_statement_postgres(pg_dsn: str) -> None:
    """A bounded walk is estimated at its bound (10,000 rows a tenant): past jit_above_cost the
    server would compile the statement before running it, ~0.3 s for a read of milliseconds
    at 1,000,000 queued. jobgate's sessions turn JIT off."""
    storage = postgres_store(pg_dsn, pool_size=1)
    await storage.open()
    try:

        async def show(conn: object) -> str:
            return str(await conn.fetchval("SHOW jit"))  # type: ignore[attr-defined]

        assert await storage.engine.executor.run(show) == "off"
    finally:
        await storage.close()
