"""The retention store over either dialect: delete finished jobs past the horizon with every
row that hangs off them, after summing their usage into usage_daily; read that rollup. Roll the
usage of provider-native batches' parts past the horizon into usage_daily_batches."""

from __future__ import annotations

from typing import Any

from jobgate.domain.retention import Horizon
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import RetentionBatch, UsageDay


class RetentionQueries(SqlPart):
    async def retention_delete(self, *, horizon: Horizon, limit: int) -> RetentionBatch:
        codec = self._sql.codec
        return await self._retention_write(
            {
                "completed_before": codec.time(horizon.completed_before),
                "now": codec.time(horizon.now),
                "limit": limit,
            }
        )

    async def _retention_write(self, params: dict[str, Any]) -> RetentionBatch:
        """Pick the batch, roll its usage up and delete it, in one transaction."""
        row = await self._sql.write_one("retention_delete", **params)
        return RetentionBatch() if row is None else self._decode.record(RetentionBatch, row)

    async def retention_batch_usage(self, *, horizon: Horizon, limit: int) -> int:
        completed_before = self._sql.codec.time(horizon.completed_before)
        return await self._batch_usage_write({"completed_before": completed_before, "limit": limit})

    async def _batch_usage_write(self, params: dict[str, Any]) -> int:
        """Pick the rows, roll them up and delete them, in one statement; how many."""
        row = await self._sql.write_one("retention_batch_usage", **params)
        return 0 if row is None else int(row["usage_ledger"])

    async def usage_daily(self, *, tenant_id: str | None = None) -> list[UsageDay]:
        rows = await self._sql.read("usage_daily", tenant_id=tenant_id)
        return [self._decode.record(UsageDay, row) for row in rows]
