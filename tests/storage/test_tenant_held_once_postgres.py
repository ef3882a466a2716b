"""PostgreSQL's insert trigger holds each tenant of a statement's new jobs once (migration 0027),
not once per job, and keeps every guarantee of the per-job check it replaced: a statement
naming one unknown tenant is refused whole with foreign_key_violation, every tenant it names
is held until commit, one event per job, one `q:` wake-up per statement."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import asyncpg
import pytest

from jobgate.domain.job import NewJob
from jobgate.storage.postgres.executor import PostgresCodec
from jobgate.storage.postgres.executor import Q as PG
from jobgate.storage.postgres.insert_many import insert_payloads
from jobgate.storage.records import Tenant
from tests.storage.helpers import new_job, wait_until_blocked_by
from tests.support.databases import PostgresTemplate

pytestmark = pytest.mark.postgres

TENANTS = ("ten_acme", "ten_other")


@pytest.fixture
async def conns(pg_template: PostgresTemplate) -> AsyncIterator[list[asyncpg.Connection]]:
    """Two plain connections to a fresh migrated database holding the TENANTS."""
    dsn = await pg_template.clone()
    conns = [await asyncpg.connect(dsn) for _ in range(2)]
    await conns[0].execute(
        "INSERT INTO tenants (id, name, webhook_secret, created_at)"
        " SELECT id, id, 'whsec_' || id, now() FROM unnest($1::text[]) AS id",
        list(TENANTS),
    )
    yield conns
    for conn in conns:
        await conn.close()
    await pg_template.drop_clone(dsn)


async def _insert(conn: asyncpg.Connection, jobs: list[NewJob]) -> None:
    """job_insert_many as the batch path sends it."""
    query = PG["job_insert_many"]
    payload, shared = insert_payloads(jobs, PostgresCodec())
    params = {"jobs": json.dumps(payload), "shared": json.dumps(shared), "now": None}
    await conn.execute(query.positional_sql, *query.args(params))


def _jobs(*tenant_ids: str) -> list[NewJob]:
    return [new_job(Tenant(t, t, "whsec_x", datetime.now(UTC))) for t in tenant_ids]


async def _stored(conn: asyncpg.Connection) -> tuple[int, int]:
    jobs = await conn.fetchval("SELECT count(*) FROM jobs")
    events = await conn.fetchval("SELECT count(*) FROM job_event_log")
    return jobs, events


@pytest.mark.asyncio
async def test_a_statement_reads_each_of_its_tenants_once_not_once_per_job(
    conns: list[asyncpg.Connection],
) -> None:
    conn = conns[0]
    async with conn.transaction():
        await _insert(conn, _jobs(*TENANTS * 150))  # 300 jobs of two tenants, interleaved
        reads = await conn.fetchval(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0)"
            "  FROM pg_stat_xact_user_tables WHERE relname = 'tenants'"
        )
    assert reads == len(TENANTS)  # main (0025): one probe per job, 300
    jobs, events = await _stored(conn)
    assert (jobs, events) == (300, 300)
    assert await conn.fetchval("SELECT count(*) FROM job_event_log WHERE seq = 1") == 300
    assert await conn.fetchval("SELECT count(*) FROM job_events") == 0  # implied (0028)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "tenant_ids",
    [
        ("ten_acme", "ten_nobody"),
        ("ten_nobody", "ten_acme"),
        ("ten_acme", "ten_other", "ten_nobody", "ten_acme", "ten_other"),
        ("ten_acme", "ten_nobody", "ten_nobody", "ten_other"),
        ("ten_nobody",),
    ],
)
async def test_a_statement_naming_one_unknown_tenant_is_refused_whole(
    conns: list[asyncpg.Connection], tenant_ids: tuple[str, ...]
) -> None:
    conn = conns[0]
    with pytest.raises(asyncpg.ForeignKeyViolationError) as refused:
        await _insert(conn, _jobs(*tenant_ids))
    assert refused.value.sqlstate == "23503"
    assert await _stored(conn) == (0, 0)


@pytest.mark.asyncio
@pytest.mark.parametrize("deleted", TENANTS)
async def test_every_tenant_of_a_statement_is_held_until_commit(
    conns: list[asyncpg.Connection], deleted: str
) -> None:
    inserter, deleter = conns
    async with inserter.transaction():
        await _insert(inserter, _jobs(*TENANTS * 3))
        delete = asyncio.create_task(deleter.execute("DELETE FROM tenants WHERE id = $1", deleted))
        await wait_until_blocked_by(inserter, delete)  # each tenant held FOR KEY SHARE
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await delete
    assert await _stored(deleter) == (6, 6)


@pytest.mark.asyncio
async def test_a_statement_of_queued_jobs_sends_one_wake_up(
    conns: list[asyncpg.Connection],
) -> None:
    conn = conns[0]
    heard: list[str] = []
    await conn.add_listener("jobgate", lambda *args: heard.append(args[3]))
    await _insert(conn, _jobs(*TENANTS * 50))
    await conn.fetchval("SELECT 1")  # the wake-up arrived before the insert's answer
    assert heard == ["q:"]
    heard.clear()
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        await _insert(conn, _jobs("ten_acme", "ten_nobody"))
    await conn.fetchval("SELECT 1")
    assert heard == []  # refused: rolled back, nothing sent
