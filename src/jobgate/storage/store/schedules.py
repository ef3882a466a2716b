"""The schedule store over either dialect (POST /v1/schedules)."""

from __future__ import annotations

from datetime import datetime

from jobgate.storage.executor import SqlPart
from jobgate.storage.records import Schedule
from jobgate.storage.transaction_requests import ScheduleInsertWrite


class ScheduleQueries(SqlPart):
    async def schedule_insert(self, *, schedule: Schedule, max_per_tenant: int) -> Schedule | None:
        codec = self._sql.codec
        row = await self._tx.schedule_insert_write(
            ScheduleInsertWrite(
                id=schedule.id,
                tenant_id=schedule.tenant_id,
                cron=schedule.cron,
                template=codec.json(schedule.template),
                paused=codec.flag(schedule.paused),
                next_run_at=codec.time(schedule.next_run_at),
                created_at=codec.time(schedule.created_at),
                max_per_tenant=max_per_tenant,
            )
        )
        return None if row is None else self._decode.record(Schedule, row)

    async def schedule_list(
        self, *, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> list[Schedule]:
        rows = await self._sql.read(
            "schedule_list", tenant_id=tenant_id, after_id=after, limit=limit
        )
        return [self._decode.record(Schedule, row) for row in rows]

    async def schedule_get(self, *, schedule_id: str, tenant_id: str) -> Schedule | None:
        row = await self._sql.read_one("schedule_get", id=schedule_id, tenant_id=tenant_id)
        return None if row is None else self._decode.record(Schedule, row)

    async def schedule_set_paused(
        self,
        *,
        schedule_id: str,
        tenant_id: str,
        paused: bool,
        next_run_at: datetime | None = None,
    ) -> Schedule | None:
        codec = self._sql.codec
        row = await self._sql.write_one(
            "schedule_set_paused",
            id=schedule_id,
            tenant_id=tenant_id,
            paused=codec.flag(paused),
            next_run_at=codec.time(next_run_at),
        )
        return None if row is None else self._decode.record(Schedule, row)

    async def schedule_delete(self, *, schedule_id: str, tenant_id: str) -> bool:
        deleted = await self._sql.write_count(
            "schedule_delete", id=schedule_id, tenant_id=tenant_id
        )
        return deleted > 0

    async def schedule_due(self, *, limit: int, now: datetime | None = None) -> list[Schedule]:
        rows = await self._sql.read("schedule_due", limit=limit, now=self._sql.codec.now(now))
        return [self._decode.record(Schedule, row) for row in rows]

    async def schedule_advance(
        self, *, schedule_id: str, slot: datetime, next_run_at: datetime
    ) -> bool:
        codec = self._sql.codec
        advanced = await self._sql.write_count(
            "schedule_advance",
            id=schedule_id,
            slot=codec.time(slot),
            next_run_at=codec.time(next_run_at),
        )
        return advanced > 0
