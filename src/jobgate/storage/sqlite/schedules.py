"""ScheduleStore on SQLite (times as Unix seconds, the template as JSON text)."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

import orjson

from jobgate.storage import sql
from jobgate.storage.records import Schedule
from jobgate.storage.rows import RowDecoder
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


class SqliteSchedules:
    """Mixed into SqliteStorage, which supplies `_db`, `_now` and `_decode`."""

    _db: SqliteDatabase
    _decode: RowDecoder

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def _one(self, query: str, params: dict[str, Any], *, write: bool) -> Any:
        def run(conn: sqlite3.Connection) -> Any:
            return conn.execute(Q[query].sql, params).fetchone()

        return await (self._db.write(run) if write else self._db.read(run))

    async def schedule_insert(self, *, schedule: Schedule) -> Schedule:
        params = {
            "id": schedule.id,
            "tenant_id": schedule.tenant_id,
            "cron": schedule.cron,
            "template": orjson.dumps(schedule.template).decode(),
            "paused": int(schedule.paused),
            "next_run_at": schedule.next_run_at.timestamp(),
            "created_at": schedule.created_at.timestamp(),
        }
        return self._decode.schedule(await self._one("schedule_insert", params, write=True))

    async def schedule_list(self, *, tenant_id: str, limit: int = 100) -> list[Schedule]:
        params = {"tenant_id": tenant_id, "limit": limit}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["schedule_list"].sql, params).fetchall()
        )
        return [self._decode.schedule(row) for row in rows]

    async def schedule_get(self, *, schedule_id: str, tenant_id: str) -> Schedule | None:
        params = {"id": schedule_id, "tenant_id": tenant_id}
        row = await self._one("schedule_get", params, write=False)
        return None if row is None else self._decode.schedule(row)

    async def schedule_set_paused(
        self,
        *,
        schedule_id: str,
        tenant_id: str,
        paused: bool,
        next_run_at: datetime | None = None,
    ) -> Schedule | None:
        params = {
            "id": schedule_id,
            "tenant_id": tenant_id,
            "paused": int(paused),
            "next_run_at": None if next_run_at is None else next_run_at.timestamp(),
        }
        row = await self._one("schedule_set_paused", params, write=True)
        return None if row is None else self._decode.schedule(row)

    async def schedule_delete(self, *, schedule_id: str, tenant_id: str) -> bool:
        params = {"id": schedule_id, "tenant_id": tenant_id}
        return await self._one("schedule_delete", params, write=True) is not None

    async def schedule_due(self, *, limit: int, now: datetime | None = None) -> list[Schedule]:
        params = {"limit": limit, "now": self._now(now)}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["schedule_due"].sql, params).fetchall()
        )
        return [self._decode.schedule(row) for row in rows]

    async def schedule_advance(
        self, *, schedule_id: str, slot: datetime, next_run_at: datetime
    ) -> bool:
        params = {
            "id": schedule_id,
            "slot": slot.timestamp(),
            "next_run_at": next_run_at.timestamp(),
        }
        return await self._one("schedule_advance", params, write=True) is not None
