"""The admission locks a PostgreSQL submit takes inside its transaction, so that a queue bound
holds exactly across processes (SQLite's one writer gives that for free)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from jobgate import errors
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.records import QueueLimit


async def lock_bounds(
    sql: PostgresExecutor, conn: Conn, limit: QueueLimit, tenant_ids: Collection[str]
) -> None:
    """Take the admission locks (tenants in order, then the global one), held until commit: a
    count made under them is exact, and the inserts that follow count for the next submit."""
    if limit.tenant_max is not None:
        for tenant_id in sorted(tenant_ids):
            await sql.fetch(conn, "queue_lock_tenant", tenant_id=tenant_id)
    if limit.total_max is not None:
        await sql.fetch(conn, "queue_lock_total")


async def check_bounds(
    sql: PostgresExecutor, conn: Conn, limit: QueueLimit, adding: Mapping[str, int]
) -> None:
    """Under the admission locks: raise errors.QueueFull if the queued jobs plus `adding` (per
    tenant) pass a bound."""
    if limit.tenant_max is not None:
        for tenant_id, count in adding.items():
            (row,) = await sql.fetch(conn, "queued_count", tenant_id=tenant_id)
            judge_tenant(limit, row["queued"] + count)
    if limit.total_max is not None:
        (row,) = await sql.fetch(conn, "queued_total")
        judge_total(limit, row["queued"] + sum(adding.values()))


def judge_tenant(limit: QueueLimit, queued: int) -> None:
    """errors.QueueFull if a tenant's `queued` jobs (counted under the locks, with what the
    transaction adds) pass its bound."""
    if limit.tenant_max is not None and queued > limit.tenant_max:
        raise errors.QueueFull("max_queued", 0)


def judge_total(limit: QueueLimit, queued: int) -> None:
    """errors.QueueFull if everyone's `queued` jobs (as judge_tenant) pass the global bound."""
    if limit.total_max is not None and queued > limit.total_max:
        raise errors.QueueFull("max_queued_total", 0)


async def admit(
    sql: PostgresExecutor, conn: Conn, limit: QueueLimit, adding: Mapping[str, int]
) -> None:
    """Inside a submit's transaction, before its insert: lock, then count."""
    await lock_bounds(sql, conn, limit, adding)
    await check_bounds(sql, conn, limit, adding)
