"""The rest of Transactions on PostgreSQL: each one statement (data-modifying CTEs) but the
schedule insert, which takes its tenant's lock before it counts so that concurrent creates in
any process never pass the cap (SQLite's one writer gives that for free)."""

from __future__ import annotations

from typing import Any

from jobgate.storage.executor import Row
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.records import RetentionBatch
from jobgate.storage.rows import RowDecoder


class PostgresWrites:
    _sql: PostgresExecutor
    _decode: RowDecoder

    async def retention_write(self, params: dict[str, Any]) -> RetentionBatch:
        row = await self._sql.write_one("retention_delete", **params)
        return RetentionBatch() if row is None else self._decode.record(RetentionBatch, row)

    async def batch_usage_write(self, params: dict[str, Any]) -> int:
        row = await self._sql.write_one("retention_batch_usage", **params)
        return 0 if row is None else int(row["usage_ledger"])

    async def delivery_write(self, params: dict[str, Any]) -> bool:
        return await self._sql.write_one("delivery_record", **params) is not None

    async def endpoint_delete_write(self, params: dict[str, Any]) -> bool:
        return await self._sql.write_one("webhook_endpoint_delete", **params) is not None

    async def schedule_insert_write(self, params: dict[str, Any]) -> Row | None:
        async def insert(conn: Conn) -> Row | None:
            await self._sql.fetch(conn, "schedule_lock_tenant", tenant_id=params["tenant_id"])
            rows = await self._sql.fetch(conn, "schedule_insert", **params)
            return rows[0] if rows else None

        return await self._sql.run(insert, transaction=True)

    async def record_ignored_write(self, params: dict[str, Any]) -> None:
        await self._sql.write("job_record_ignored", **params)
