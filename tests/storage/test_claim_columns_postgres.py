"""PostgreSQL's claim answers the columns a Job is decoded from, not every column of the row
(as SQLite's does): the columns no Job holds were encoded by PostgreSQL and decoded by the
worker for every claimed job, then thrown away."""

from __future__ import annotations

import dataclasses

import asyncpg
import pytest

from jobgate.domain.job import Job
from jobgate.storage.postgres.executor import Q
from jobgate.storage.postgres.store import postgres_store
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]


async def test_the_claim_returns_exactly_the_columns_of_a_job(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        statement = await conn.prepare(Q["job_claim"].positional_sql)
        returned = [attribute.name for attribute in statement.get_attributes()]
        table = await conn.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'jobs'::regclass"
            " AND attnum > 0 AND NOT attisdropped"
        )
    finally:
        await conn.close()
    fields = [f.name for f in dataclasses.fields(Job) if f.name != "damaged"]
    assert sorted(returned) == sorted(fields)
    assert len(table) > len(returned)  # the point: the columns no Job holds stay behind


async def test_a_claimed_job_reads_as_the_stored_job(pg_dsn: str) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage)
        await submit_one(storage, job=new_job(tenant))
        (claimed,) = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=30)
        assert claimed == await storage.job_get(job_id=claimed.id)
        assert claimed.damaged == ()
    finally:
        await storage.close()
