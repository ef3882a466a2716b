"""The rest of Transactions on PostgreSQL: each one statement (data-modifying CTEs) but the
schedule insert, which takes its tenant's lock before it counts so that concurrent creates in
any process never pass the cap (SQLite's one writer gives that for free)."""

from __future__ import annotations

from jobgate.storage.executor import Row
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.records import RetentionBatch
from jobgate.storage.rows import RowDecoder
from jobgate.storage.transaction_requests import (
    BatchUsageWrite,
    DeliveryWrite,
    EndpointDeleteWrite,
    RecordIgnoredWrite,
    RetentionWrite,
    ScheduleInsertWrite,
    record_params,
)


class PostgresWrites:
    _sql: PostgresExecutor
    _decode: RowDecoder

    async def retention_write(self, request: RetentionWrite) -> RetentionBatch:
        row = await self._sql.write_one("retention_delete", **record_params(request))
        return RetentionBatch() if row is None else self._decode.record(RetentionBatch, row)

    async def batch_usage_write(self, request: BatchUsageWrite) -> int:
        row = await self._sql.write_one("retention_batch_usage", **record_params(request))
        return 0 if row is None else int(row["usage_ledger"])

    async def delivery_write(self, request: DeliveryWrite) -> bool:
        return await self._sql.write_one("delivery_record", **record_params(request)) is not None

    async def endpoint_delete_write(self, request: EndpointDeleteWrite) -> bool:
        params = record_params(request)
        return await self._sql.write_one("webhook_endpoint_delete", **params) is not None

    async def schedule_insert_write(self, request: ScheduleInsertWrite) -> Row | None:
        async def insert(conn: Conn) -> Row | None:
            await self._sql.fetch(conn, "schedule_lock_tenant", tenant_id=request.tenant_id)
            rows = await self._sql.fetch(conn, "schedule_insert", **record_params(request))
            return rows[0] if rows else None

        return await self._sql.run(insert, transaction=True)

    async def record_ignored_write(self, request: RecordIgnoredWrite) -> None:
        await self._sql.write("job_record_ignored", **record_params(request))
