"""SignalStore on PostgreSQL: what the alert gauges read at scrape time."""

from __future__ import annotations

from typing import Any

import asyncpg


class PostgresSignals:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def webhook_endpoints_failing(self, *, min_attempts: int) -> dict[str, int]:
        rows = await self._fetch("webhook_endpoints_failing", min_attempts=min_attempts)
        return {row["tenant_id"]: row["failing"] for row in rows}
