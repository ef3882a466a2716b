"""RetentionStore on PostgreSQL: one statement per batch deletes the jobs and every row that
hangs off them, after summing their usage into usage_daily."""

from __future__ import annotations

from typing import Any

import asyncpg

from jobgate.domain.retention import Horizon
from jobgate.storage.records import RetentionBatch, UsageDay


class PostgresRetention:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def _fetchrow(self, query_name: str, /, **params: Any) -> asyncpg.Record | None:
        raise NotImplementedError

    async def retention_delete(self, *, horizon: Horizon, limit: int) -> RetentionBatch:
        row = await self._fetchrow(
            "retention_delete",
            completed_before=horizon.completed_before,
            created_before=horizon.created_before,
            usage_before=horizon.usage_before,
            limit=limit,
        )
        if row is None:
            return RetentionBatch()
        return RetentionBatch(
            jobs=row["jobs"],
            job_events=row["job_events"],
            outbox=row["outbox"],
            webhook_attempts=row["webhook_attempts"],
            usage_ledger=row["usage_ledger"],
        )

    async def usage_daily(self, *, tenant_id: str | None = None) -> list[UsageDay]:
        return [
            UsageDay(
                tenant_id=row["tenant_id"],
                day=row["day"],
                provider=row["provider"],
                model=row["model"],
                jobs=row["jobs"],
                input_tokens=row["input_tokens"],
                output_tokens=row["output_tokens"],
                cache_read_tokens=row["cache_read_tokens"],
                cache_write_tokens=row["cache_write_tokens"],
            )
            for row in await self._fetch("usage_daily", tenant_id=tenant_id)
        ]
