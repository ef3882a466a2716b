"""SQLite's claim answers the columns a Job is decoded from, not every column of the row: a
claimed job is fetched per row and column by the writer thread, whose time caps the drain."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from jobgate.domain.job import Job
from jobgate.storage.sqlite.executor import Q
from jobgate.storage.sqlite.store import register_functions, sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one


async def test_the_claim_returns_exactly_the_columns_of_a_job(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "jobgate.db"
    storage = sqlite_store(str(path), clock=clock)
    await storage.open()
    await storage.migrate()
    await storage.close()
    conn = sqlite3.connect(path)
    register_functions(conn)  # the row trigger's
    try:
        cursor = conn.execute(
            Q["job_claim"].sql, {"ids": "[]", "worker_id": "w", "now": 0.0, "lease_ttl_s": 30.0}
        )
        returned = [column[0] for column in cursor.description]
        table = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
    finally:
        conn.close()
    fields = [f.name for f in dataclasses.fields(Job) if f.name != "damaged"]
    assert sorted(returned) == sorted(fields)
    assert len(table) > len(returned)  # the point: the columns no Job holds stay behind


async def test_a_claimed_job_reads_as_the_stored_job(tmp_path: Path, clock: FakeClock) -> None:
    storage = sqlite_store(str(tmp_path / "jobgate.db"), clock=clock)
    await storage.open()
    await storage.migrate()
    try:
        tenant = await make_tenant(storage)
        await submit_one(storage, job=new_job(tenant), now=clock.now())
        (claimed,) = await storage.job_claim(
            worker_id="w", limit=1, lease_ttl_s=30, now=clock.now()
        )
        assert claimed == await storage.job_get(job_id=claimed.id)
        assert claimed.damaged == ()
    finally:
        await storage.close()
