"""SignalStore on both dialects: what the alert gauges read at scrape time."""

from __future__ import annotations

from jobgate.storage.executor import SqlPart


class SignalQueries(SqlPart):
    async def webhook_endpoints_failing(self, *, min_attempts: int) -> dict[str, int]:
        rows = await self._sql.read("webhook_endpoints_failing", min_attempts=min_attempts)
        return {row["tenant_id"]: int(row["failing"]) for row in rows}
