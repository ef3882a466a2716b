"""A job's tenant exists. On PostgreSQL that is checked in one statement (migration 0025: the
insert trigger holds each job's tenant FOR KEY SHARE as it writes the first events), not by a
foreign key's query per row; the rule itself is unchanged on both stores: a job naming an
unknown tenant is refused with nothing stored, and a tenant that still has jobs cannot be
deleted or renamed, also while an insert of its jobs is in flight."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from jobgate import errors
from jobgate.domain.job import NewJob
from jobgate.storage.postgres.executor import PostgresCodec
from jobgate.storage.postgres.executor import Q as PG
from jobgate.storage.postgres.insert_many import insert_payloads
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from tests.storage.helpers import insert_many, make_tenant, new_job, queued, wait_until_blocked_by
from tests.support.databases import PostgresTemplate


@pytest.mark.asyncio
async def test_a_job_naming_an_unknown_tenant_is_refused_with_nothing_stored(
    storage: Storage,
) -> None:
    tenant = await make_tenant(storage)
    stray = new_job(tenant, tenant_id="ten_nobody")
    with pytest.raises(errors.StorageError):
        await insert_many(storage, jobs=[new_job(tenant), stray, new_job(tenant)])
    with pytest.raises(errors.StorageError):
        await insert_many(storage, jobs=[stray])
    assert await queued(storage, tenant.id) == 0
    assert await storage.job_get(job_id=stray.id) is None


@pytest.fixture
async def pg_conns(pg_template: PostgresTemplate) -> AsyncIterator[list[asyncpg.Connection]]:
    """Two plain connections to a fresh migrated database, tenant ten_acme in it."""
    dsn = await pg_template.clone()
    conns = [await asyncpg.connect(dsn) for _ in range(2)]
    await conns[0].execute(
        "INSERT INTO tenants (id, name, webhook_secret, created_at)"
        " VALUES ('ten_acme', 'acme', 'whsec_acme', now())"
    )
    yield conns
    for conn in conns:
        await conn.close()
    await pg_template.drop_clone(dsn)


async def _insert(conn: asyncpg.Connection, *jobs: NewJob) -> None:
    query = PG["job_insert_many"]
    codec = PostgresCodec()
    payload, shared = insert_payloads(jobs, codec)
    params = {"jobs": json.dumps(payload), "shared": json.dumps(shared), "now": None}
    await conn.execute(query.positional_sql, *query.args(params))


def _job(tenant_id: str) -> NewJob:
    return new_job(Tenant(tenant_id, tenant_id, "whsec_x", datetime.now(UTC)))


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_checks_the_tenant_per_statement_not_per_row(
    pg_conns: list[asyncpg.Connection],
) -> None:
    conn = pg_conns[0]
    references = await conn.fetchval(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = 'jobs'::regclass AND contype = 'f'"
    )
    assert references == 0  # no foreign key: no query per inserted row
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await _insert(conn, _job("ten_acme"), _job("ten_nobody"))
    assert await conn.fetchval("SELECT count(*) FROM jobs") == 0
    await _insert(conn, *(_job("ten_acme") for _ in range(3)))
    assert await conn.fetchval("SELECT count(*) FROM jobs") == 3
    with pytest.raises(asyncpg.ForeignKeyViolationError):  # moving a job is checked too
        await conn.execute("UPDATE jobs SET tenant_id = 'ten_nobody'")
    await conn.execute(
        "INSERT INTO tenants (id, name, webhook_secret, created_at)"
        " VALUES ('ten_other', 'other', 'whsec_other', now())"
    )
    moved = await conn.execute(
        "UPDATE jobs SET tenant_id = 'ten_other' WHERE id = (SELECT min(id) FROM jobs)"
    )
    assert moved == "UPDATE 1"


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_a_tenant_with_jobs_is_neither_deleted_nor_renamed(
    pg_conns: list[asyncpg.Connection],
) -> None:
    conn = pg_conns[0]
    await _insert(conn, _job("ten_acme"))
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await conn.execute("DELETE FROM tenants WHERE id = 'ten_acme'")
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await conn.execute("UPDATE tenants SET id = 'ten_renamed' WHERE id = 'ten_acme'")
    assert await conn.execute("UPDATE tenants SET name = 'acme2'") == "UPDATE 1"
    await conn.execute("DELETE FROM job_events")
    await conn.execute("DELETE FROM jobs")
    assert await conn.execute("DELETE FROM tenants WHERE id = 'ten_acme'") == "DELETE 1"


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_a_delete_waits_for_an_insert_in_flight_then_sees_its_jobs(
    pg_conns: list[asyncpg.Connection],
) -> None:
    inserter, deleter = pg_conns
    async with inserter.transaction():
        await _insert(inserter, _job("ten_acme"))
        delete = asyncio.create_task(deleter.execute("DELETE FROM tenants WHERE id = 'ten_acme'"))
        await wait_until_blocked_by(inserter, delete)  # the tenant is held FOR KEY SHARE
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await delete
    assert await deleter.fetchval("SELECT count(*) FROM jobs") == 1


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_an_insert_waits_for_a_delete_in_flight_then_is_refused(
    pg_conns: list[asyncpg.Connection],
) -> None:
    deleter, inserter = pg_conns
    async with deleter.transaction():
        await deleter.execute("DELETE FROM tenants WHERE id = 'ten_acme'")
        insert = asyncio.create_task(_insert(inserter, _job("ten_acme")))
        await wait_until_blocked_by(deleter, insert)
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await insert
    assert await inserter.fetchval("SELECT count(*) FROM jobs") == 0
