"""The retention store over either dialect: delete finished jobs past the horizon with every
row that hangs off them, after summing their usage into usage_daily; read that rollup. Roll the
usage of provider-native batches' parts past the horizon into usage_daily_batches."""

from __future__ import annotations

from datetime import datetime

from jobgate.domain.retention import Horizon
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import PartitionDrops, RetentionBatch, UsageDay
from jobgate.storage.transaction_requests import (
    BatchUsageWrite,
    PartitionsDrop,
    PartitionsEnsure,
    RetentionWrite,
)


class RetentionQueries(SqlPart):
    async def retention_delete(self, *, horizon: Horizon, limit: int) -> RetentionBatch:
        codec = self._sql.codec
        return await self._tx.retention_write(
            RetentionWrite(
                completed_before=codec.time(horizon.completed_before),
                now=codec.time(horizon.now),
                limit=limit,
            )
        )

    async def retention_batch_usage(self, *, horizon: Horizon, limit: int) -> int:
        completed_before = self._sql.codec.time(horizon.completed_before)
        return await self._tx.batch_usage_write(BatchUsageWrite(completed_before, limit))

    async def history_partitions_ensure(self, *, days_ahead: int, now: datetime) -> int:
        return await self._tx.partitions_ensure(PartitionsEnsure(days_ahead, now))

    async def history_partitions_drop(self, *, horizon: Horizon, max_kept: int) -> PartitionDrops:
        return await self._tx.partitions_drop(PartitionsDrop(horizon, max_kept))

    async def usage_daily(self, *, tenant_id: str | None = None) -> list[UsageDay]:
        rows = await self._sql.read("usage_daily", tenant_id=tenant_id)
        return [self._decode.record(UsageDay, row) for row in rows]
