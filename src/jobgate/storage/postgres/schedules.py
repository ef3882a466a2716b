"""PostgreSQL's own part of the schedule store: a create takes its tenant's lock before it
counts, so that concurrent creates in any process never pass the cap (SQLite's one writer
gives that for free)."""

from __future__ import annotations

from typing import Any

from jobgate.storage.executor import Row
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.store.schedules import ScheduleQueries


class PostgresSchedules(ScheduleQueries):
    _sql: PostgresExecutor

    async def _schedule_insert_capped(self, params: dict[str, Any]) -> Row | None:
        async def insert(conn: Conn) -> Row | None:
            await self._sql.fetch(conn, "schedule_lock_tenant", tenant_id=params["tenant_id"])
            rows = await self._sql.fetch(conn, "schedule_insert", **params)
            return rows[0] if rows else None

        return await self._sql.run(insert, transaction=True)
