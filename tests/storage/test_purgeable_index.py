"""jobs_purgeable (migration 0022) indexes completed, unpurged jobs only, so that an insert or a
claim writes no entry in it, and the retention purge still finds its jobs through it."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from jobgate.storage.postgres.executor import Q as PG
from jobgate.storage.sqlite.executor import Q as LITE
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock

# The purge's selection (job_purge_expired picks its jobs with it, in both dialects).
PICK = "purged_at IS NULL AND completed_at < "


def test_the_purge_queries_pick_jobs_by_completion() -> None:
    assert PICK in PG["job_purge_expired"].sql and PICK in LITE["job_purge_expired"].sql


@pytest.mark.asyncio
async def test_sqlite_purge_uses_the_completed_only_index(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "jobgate.db"
    storage = sqlite_store(str(path), clock=clock)
    await storage.open()
    await storage.migrate()
    await storage.close()
    conn = sqlite3.connect(path)
    (where,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'jobs_purgeable'"
    ).fetchone()
    assert "completed_at IS NOT NULL" in where
    plan = conn.execute(
        f"EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE {PICK} :cut ORDER BY completed_at LIMIT 10",
        {"cut": clock.now().timestamp()},
    ).fetchall()
    conn.close()
    assert any("USING INDEX jobs_purgeable" in row[3] for row in plan), plan


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_purge_uses_the_completed_only_index(pg_dsn: str, clock: FakeClock) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        where = await conn.fetchval(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index"
            " WHERE indexrelid = 'jobs_purgeable'::regclass"
        )
        assert "completed_at IS NOT NULL" in where
        async with conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = off")
            query = PG["job_purge_expired"]
            cut = clock.now() - timedelta(days=1)
            params = {"completed_before": cut, "limit": 10, "now": None}
            plan = await conn.fetch("EXPLAIN " + query.positional_sql, *query.args(params))
        assert any("jobs_purgeable" in row[0] for row in plan), plan
    finally:
        await conn.close()
