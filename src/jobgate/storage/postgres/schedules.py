"""ScheduleStore on PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from jobgate.storage.records import Schedule
from jobgate.storage.rows import RowDecoder


class PostgresSchedules:
    """Mixed into PostgresStorage, which supplies the query helpers and `_decode`."""

    _decode: RowDecoder

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def _fetchrow(self, query_name: str, /, **params: Any) -> asyncpg.Record | None:
        raise NotImplementedError

    async def schedule_insert(self, *, schedule: Schedule) -> Schedule:
        row = await self._fetchrow(
            "schedule_insert",
            id=schedule.id,
            tenant_id=schedule.tenant_id,
            cron=schedule.cron,
            template=schedule.template,
            paused=schedule.paused,
            next_run_at=schedule.next_run_at,
            created_at=schedule.created_at,
        )
        assert row is not None
        return self._decode.schedule(row)

    async def schedule_list(self, *, tenant_id: str, limit: int = 100) -> list[Schedule]:
        rows = await self._fetch("schedule_list", tenant_id=tenant_id, limit=limit)
        return [self._decode.schedule(row) for row in rows]

    async def schedule_get(self, *, schedule_id: str, tenant_id: str) -> Schedule | None:
        row = await self._fetchrow("schedule_get", id=schedule_id, tenant_id=tenant_id)
        return None if row is None else self._decode.schedule(row)

    async def schedule_set_paused(
        self,
        *,
        schedule_id: str,
        tenant_id: str,
        paused: bool,
        next_run_at: datetime | None = None,
    ) -> Schedule | None:
        row = await self._fetchrow(
            "schedule_set_paused",
            id=schedule_id,
            tenant_id=tenant_id,
            paused=paused,
            next_run_at=next_run_at,
        )
        return None if row is None else self._decode.schedule(row)

    async def schedule_delete(self, *, schedule_id: str, tenant_id: str) -> bool:
        row = await self._fetchrow("schedule_delete", id=schedule_id, tenant_id=tenant_id)
        return row is not None

    async def schedule_due(self, *, limit: int, now: datetime | None = None) -> list[Schedule]:
        rows = await self._fetch("schedule_due", limit=limit, now=now)
        return [self._decode.schedule(row) for row in rows]

    async def schedule_advance(
        self, *, schedule_id: str, slot: datetime, next_run_at: datetime
    ) -> bool:
        row = await self._fetchrow(
            "schedule_advance", id=schedule_id, slot=slot, next_run_at=next_run_at
        )
        return row is not None
