"""The retention store over either dialect: delete finished jobs past the horizon with every
row that hangs off them, after summing their usage into usage_daily; read that rollup."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jobgate.domain.retention import Horizon
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import RetentionBatch, UsageDay
from jobgate.storage.rows import from_columns

_USAGE_COUNTS = ("jobs", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class RetentionQueries(SqlPart):
    async def retention_delete(self, *, horizon: Horizon, limit: int) -> RetentionBatch:
        codec = self._sql.codec
        return await self._retention_write(
            {
                "completed_before": codec.time(horizon.completed_before),
                "created_before": codec.time(horizon.created_before),
                "usage_before": codec.time(horizon.usage_before),
                "limit": limit,
            }
        )

    async def _retention_write(self, params: dict[str, Any]) -> RetentionBatch:
        """Pick the batch, roll its usage up and delete it, in one transaction."""
        row = await self._sql.write_one("retention_delete", **params)
        if row is None:
            return RetentionBatch()
        return from_columns(RetentionBatch, row)

    async def usage_daily(self, *, tenant_id: str | None = None) -> list[UsageDay]:
        return [
            from_columns(
                UsageDay,
                row,
                day=dt.date.fromisoformat(str(row["day"])),  # a date, or ISO text (SQLite)
                **{name: int(row[name]) for name in _USAGE_COUNTS},
            )
            for row in await self._sql.read("usage_daily", tenant_id=tenant_id)
        ]
