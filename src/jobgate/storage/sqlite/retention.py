"""RetentionStore on SQLite: one write operation per batch picks the jobs, sums their usage
into usage_daily and deletes them with every row that hangs off them."""

from __future__ import annotations

import datetime as dt
import sqlite3

import orjson

from jobgate.domain.retention import Horizon
from jobgate.storage import sql
from jobgate.storage.records import RetentionBatch, UsageDay
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


class SqliteRetention:
    """Mixed into SqliteStorage, which supplies `_db`."""

    _db: SqliteDatabase

    async def retention_delete(self, *, horizon: Horizon, limit: int) -> RetentionBatch:
        pick = {
            "completed_before": horizon.completed_before.timestamp(),
            "created_before": horizon.created_before.timestamp(),
            "usage_before": horizon.usage_before.timestamp(),
            "limit": limit,
        }

        def delete(conn: sqlite3.Connection) -> RetentionBatch:
            ids = [row["id"] for row in conn.execute(Q["retention_pick"].sql, pick)]
            if not ids:
                return RetentionBatch()
            batch = {"ids": orjson.dumps(ids).decode()}
            conn.execute(Q["retention_rollup"].sql, batch)

            def rows(name: str) -> int:
                return conn.execute(Q[name].sql, batch).rowcount

            return RetentionBatch(
                usage_ledger=rows("retention_delete_usage"),
                job_events=rows("retention_delete_events"),
                webhook_attempts=rows("retention_delete_attempts"),
                outbox=rows("retention_delete_outbox"),
                jobs=rows("retention_delete_jobs"),
            )

        return await self._db.write(delete)

    async def usage_daily(self, *, tenant_id: str | None = None) -> list[UsageDay]:
        params = {"tenant_id": tenant_id}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["usage_daily"].sql, params).fetchall()
        )
        return [
            UsageDay(
                tenant_id=row["tenant_id"],
                day=dt.date.fromisoformat(row["day"]),
                provider=row["provider"],
                model=row["model"],
                jobs=int(row["jobs"]),
                input_tokens=int(row["input_tokens"]),
                output_tokens=int(row["output_tokens"]),
                cache_read_tokens=int(row["cache_read_tokens"]),
                cache_write_tokens=int(row["cache_write_tokens"]),
            )
            for row in rows
        ]
