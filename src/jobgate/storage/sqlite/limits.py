"""LimitsStore on SQLite: tenant limit overrides, queue accounting, retention."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

import orjson

from jobgate.domain import costs
from jobgate.storage import shared, sql
from jobgate.storage.records import LimitOverrides, QueueCounts
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


def _json_out(value: Any) -> Any:
    return None if value is None else orjson.loads(value)


class SqliteLimits:
    """Mixed into SqliteStorage, which supplies `_db` and `_now`."""

    _db: SqliteDatabase

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def tenant_limits_set(
        self, *, tenant_id: str, overrides: LimitOverrides, now: datetime | None = None
    ) -> LimitOverrides:
        params = shared.overrides_params(overrides)
        for field in ("allowed_models", "allowed_providers"):
            if params[field] is not None:
                params[field] = orjson.dumps(params[field]).decode()
        params.update(tenant_id=tenant_id, now=self._now(now))
        row = await self._db.write(
            lambda conn: conn.execute(Q["tenant_limits_upsert"].sql, params).fetchone()
        )
        return shared.overrides_from_row(row, _json_out)

    async def tenant_limits_all(self) -> dict[str, LimitOverrides]:
        rows = await self._db.read(lambda conn: conn.execute(Q["tenant_limits_all"].sql).fetchall())
        return {row["tenant_id"]: shared.overrides_from_row(row, _json_out) for row in rows}

    async def queue_counts(self) -> QueueCounts:
        def read(conn: sqlite3.Connection) -> QueueCounts:
            queued = dict(conn.execute(Q["queued_by_tenant"].sql).fetchall())
            claimed = dict(conn.execute(Q["claimed_by_tenant"].sql).fetchall())
            return QueueCounts(queued, claimed)

        return await self._db.read(read)

    async def queued_count(self, *, tenant_id: str) -> int:
        row = await self._db.read(
            lambda conn: conn.execute(Q["queued_count"].sql, {"tenant_id": tenant_id}).fetchone()
        )
        return int(row["queued"])

    async def usage_tokens_since(self, *, since: datetime) -> dict[str, int]:
        params = {"since": since.timestamp()}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["usage_tokens_since"].sql, params).fetchall()
        )
        return {row["tenant_id"]: int(row["tokens"] or 0) for row in rows}

    async def usage_by_model_since(self, *, since: datetime) -> list[costs.UsageTotal]:
        params = {"since": since.timestamp()}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["usage_by_model_since"].sql, params).fetchall()
        )
        return [shared.usage_total_from_row(row) for row in rows]

    async def job_purge_expired(
        self, *, completed_before: datetime, limit: int, now: datetime | None = None
    ) -> int:
        params = {
            "completed_before": completed_before.timestamp(),
            "limit": limit,
            "now": self._now(now),
        }
        rows = await self._db.write(
            lambda conn: conn.execute(Q["job_purge_expired"].sql, params).fetchall()
        )
        return len(rows)

    async def idempotency_purge_expired(self, *, limit: int, now: datetime | None = None) -> int:
        params = {"limit": limit, "now": self._now(now)}
        rows = await self._db.write(
            lambda conn: conn.execute(Q["idempotency_purge_expired"].sql, params).fetchall()
        )
        return len(rows)
