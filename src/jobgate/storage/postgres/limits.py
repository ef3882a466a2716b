"""PostgreSQL's own part of the limits store: the admission locks a submit takes inside its
transaction, so that a queue bound holds exactly across processes (SQLite's one writer gives
that for free)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobgate import errors
from jobgate.storage.postgres.executor import PostgresExecutor
from jobgate.storage.records import QueueLimit
from jobgate.storage.store.limits import LimitQueries


class PostgresLimits(LimitQueries):
    _sql: PostgresExecutor

    async def _admit_locked(self, conn: Any, limit: QueueLimit, adding: Mapping[str, int]) -> None:
        """Inside the submit's transaction: take the admission locks (tenants in order, then
        the global one), count exactly, and raise errors.QueueFull if the `adding` jobs (per
        tenant) would pass a bound. The locks hold until commit, so the insert that follows
        counts for the next submit: a bound holds exactly across processes."""
        if limit.tenant_max is not None:
            for tenant_id in sorted(adding):
                await self._sql.fetch(conn, "queue_lock_tenant", tenant_id=tenant_id)
        if limit.total_max is not None:
            await self._sql.fetch(conn, "queue_lock_total")
        if limit.tenant_max is not None:
            for tenant_id, count in adding.items():
                (row,) = await self._sql.fetch(conn, "queued_count", tenant_id=tenant_id)
                if row["queued"] + count > limit.tenant_max:
                    raise errors.QueueFull("max_queued", 0)
        if limit.total_max is not None:
            (row,) = await self._sql.fetch(conn, "queued_total")
            if row["queued"] + sum(adding.values()) > limit.total_max:
                raise errors.QueueFull("max_queued_total", 0)
