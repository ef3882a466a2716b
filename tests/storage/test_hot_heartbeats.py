"""A heartbeat writes only `lease_expires_at`, and no index of `jobs` holds that column
(migration 0024 replaced jobs_lease_expiry by jobs_running): on PostgreSQL a renewal is then a
HOT update (no index entry written, the new row beside the old one on its page), and on SQLite
it rewrites no index. The readers of the old index, the reaper and the claims' running counts,
read jobs_running instead, never every job."""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.postgres.claims import claim_params
from jobgate.storage.postgres.executor import Q as PG
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import ClaimPolicy, ClaimRequest
from jobgate.storage.sqlite.executor import Q as LITE
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_many, make_tenant, new_job
from tests.storage.pg_plans import PLAN_MODES, explained, nodes

JOBS = 600
SPREAD = 20  # every twentieth job runs: about one per page
RUNNING = JOBS // SPREAD
FINISHED = 300  # the oldest of the rest, as a drain leaves them (for the reaper's scan)


def _written(sql: str) -> set[str]:
    """The columns an `UPDATE ... SET a = ..., b = ... FROM` statement writes."""
    (assignments,) = re.findall(r"\bSET\s+(.*?)\s+FROM\b", sql, re.DOTALL)
    return set(re.findall(r"(\w+)\s*=(?!>)", assignments))


def test_a_heartbeat_writes_only_the_lease_expiry() -> None:
    assert _written(PG["job_heartbeat"].sql) == {"lease_expires_at"}
    assert _written(LITE["job_heartbeat"].sql) == {"lease_expires_at"}


async def _fill(storage: Storage, *, finished: int, clock: FakeClock | None = None) -> list[Lease]:
    """JOBS jobs: every SPREAD-th held (RUNNING), then the oldest `finished` of the others
    done, the rest queued. Answers the leases held."""
    tenant = await make_tenant(storage, "hot")
    jobs = await insert_many(storage, jobs=[new_job(tenant) for _ in range(JOBS)])
    now = clock.now() if clock else None
    held = await storage.job_claim_by_id(
        worker_id="w", job_ids=[job.id for job in jobs[::SPREAD]], lease_ttl_s=60.0, now=now
    )
    if finished:
        done = await storage.job_claim(worker_id="w", limit=finished, lease_ttl_s=60.0, now=now)
        await storage.job_finish_many(
            finishes=[_succeeded(Lease(job.id, job.lease_token or "")) for job in done], now=now
        )
    assert len(held.claimed) == RUNNING
    return [Lease(job.id, job.lease_token or "") for job in held.claimed]


def _succeeded(lease: Lease) -> Finish:
    return Finish(lease=lease, state=JobState.SUCCEEDED, reason="completed", result={})


async def _explain(
    conn: asyncpg.Connection, name: str, params: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """The nodes of a statement's custom plan and of its generic plan (the one asyncpg settles
    on after five executions), each run for real and rolled back."""
    return {mode: nodes(await explained(conn, name, params, mode)) for mode in PLAN_MODES}


async def _filled_postgres(dsn: str, *, finished: int) -> list[Lease]:
    storage = postgres_store(dsn, pool_size=2)
    await storage.open()
    try:
        return await _fill(storage, finished=finished)
    finally:
        await storage.close()


async def _updates(conn: asyncpg.Connection) -> tuple[int, int]:
    """This backend's updates of jobs, and how many were HOT, not yet flushed to the shared
    statistics (a flush happens only between transactions)."""
    row = await conn.fetchrow(
        "SELECT pg_stat_get_xact_tuples_updated('jobs'::regclass) AS updated,"
        " pg_stat_get_xact_tuples_hot_updated('jobs'::regclass) AS hot"
    )
    assert row is not None
    return row["updated"], row["hot"]


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_heartbeats_are_hot_updates(pg_dsn: str) -> None:
    # Each held job has room beside it for its renewals (the fillfactor's reserve on a page
    # written by inserts alone), whether or not PostgreSQL may prune old rows meanwhile: with
    # finished jobs among them, renewals on the shared test server were HOT or not depending
    # on what else the server was running.
    leases = await _filled_postgres(pg_dsn, finished=0)
    conn = await asyncpg.connect(pg_dsn)
    try:
        query = PG["job_heartbeat"]
        held = json.dumps([{"id": lease.job_id, "token": lease.token} for lease in leases])
        args = query.args({"leases": held, "lease_ttl_s": 60.0, "now": None})
        for _ in range(3):  # the reserve holds three beats' rows even if none is pruned
            # Their growth inside one transaction is exactly this statement's rows.
            async with conn.transaction():
                updated_before, hot_before = await _updates(conn)
                renewed = await conn.fetch(query.positional_sql, *args)
                updated, hot = await _updates(conn)
            assert len(renewed) == RUNNING
            assert (updated - updated_before, hot - hot_before) == (RUNNING, RUNNING)
        indexes = await conn.fetch(
            "SELECT indexrelid::regclass::text AS name, pg_get_indexdef(indexrelid) AS definition"
            " FROM pg_index WHERE indrelid = 'jobs'::regclass"
        )
        # What makes it so: no index of jobs holds the column renewed.
        assert "jobs_running" in {row["name"] for row in indexes}
        assert not [row["name"] for row in indexes if "lease_expires_at" in row["definition"]]
    finally:
        await conn.close()


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_reaper_and_running_counts_read_jobs_running(pg_dsn: str) -> None:
    await _filled_postgres(pg_dsn, finished=FINISHED)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("ANALYZE jobs")
        # Leases that ran out: the reaper's `now` an hour ahead, so every held job is found.
        reap = {"limit": 500, "now": await conn.fetchval("SELECT now() + interval '1 hour'")}
        claim = claim_params(ClaimRequest("w", 64, 60.0, ClaimPolicy(), None, None))
        claim["shares"] = json.dumps(claim["shares"])  # jsonb: the pool's codec is not here
        claim["blocked_keys"] = json.dumps(claim["blocked_keys"])
        for name, params, found in (
            ("job_leases_expired", reap, RUNNING),
            ("job_claim", claim, 64),
        ):
            for mode, nodes in (await _explain(conn, name, params)).items():
                assert nodes[0]["Actual Rows"] == found, (name, mode)
                scans = [node for node in nodes if node.get("Relation Name") == "jobs"]
                running = [node for node in scans if node.get("Index Name") == "jobs_running"]
                assert running, (name, mode, [node.get("Index Name") for node in scans])
                assert not [node for node in scans if node["Node Type"] == "Seq Scan"], (name, mode)
                if name == "job_leases_expired":
                    # Only running jobs are read: the index, not a walk over finished jobs.
                    assert sum(node.get("Actual Rows", 0) for node in running) == RUNNING
    finally:
        await conn.close()


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_reaper_locks_the_oldest_expired_leases_past_held_ones(pg_dsn: str) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage, "reaped")
        await insert_many(storage, jobs=[new_job(tenant) for _ in range(6)])
        # The k-th job claimed gets the k-th longest lease: expiry order is not claim order.
        held = [
            (await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60.0 - 10 * k))[0].id
            for k in range(6)
        ]
    finally:
        await storage.close()
    oldest_first = held[::-1]
    holder = await asyncpg.connect(pg_dsn)
    reaper = await asyncpg.connect(pg_dsn)
    try:
        async with holder.transaction():  # another reaper holds the oldest
            await holder.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", oldest_first[0])
            query = PG["job_leases_expired"]
            later = await reaper.fetchval("SELECT now() + interval '1 hour'")
            async with reaper.transaction():
                rows = await reaper.fetch(
                    query.positional_sql, *query.args({"limit": 3, "now": later})
                )
        # Skipped, not waited for, and the limit counts only the rows this reaper locked.
        assert [row["id"] for row in rows] == oldest_first[1:4]
        assert rows[0]["tenant_id"] == tenant.id and rows[0]["state"] == "running"
    finally:
        await holder.close()
        await reaper.close()


@pytest.mark.asyncio
async def test_sqlite_heartbeat_writes_no_index_and_readers_use_jobs_running(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "jobgate.db"
    storage = sqlite_store(str(path), clock=clock)
    await storage.open()
    await storage.migrate()
    try:
        leases = await _fill(storage, finished=FINISHED, clock=clock)
        clock.advance(30)
        renewed = await storage.job_heartbeat(leases=leases, lease_ttl_s=60.0)
        assert len(renewed) == RUNNING
        later = (clock.now() + timedelta(hours=1)).timestamp()
        reaped = await storage.job_reap_expired(
            limit=500, retry_delay=lambda attempt: 0.0, now=clock.now() + timedelta(hours=1)
        )
        assert reaped.total == RUNNING
    finally:
        await storage.close()
    conn = sqlite3.connect(path)
    try:
        definitions = [
            sql
            for (sql,) in conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
                " AND sql IS NOT NULL"
            )
        ]
        assert any("jobs_running" in sql for sql in definitions)
        assert not [sql for sql in definitions if "lease_expires_at" in sql]
        for name, params in (
            ("job_leases_expired", {"now": later, "limit": 500}),
            ("job_claim_running", {}),
        ):
            plan = conn.execute("EXPLAIN QUERY PLAN " + LITE[name].sql, params).fetchall()
            assert any("USING INDEX jobs_running" in row[3] for row in plan), (name, plan)
    finally:
        conn.close()
