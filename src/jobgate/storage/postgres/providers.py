"""The provider store's transactions on PostgreSQL (part of Transactions): each one statement
(data-modifying CTEs), plus waking reconcilers in other processes (NOTIFY) and the re-check that
READ COMMITTED needs (see job_reconcile_if_event)."""

from __future__ import annotations

from jobgate.storage.executor import Row
from jobgate.storage.postgres.executor import PostgresExecutor
from jobgate.storage.transaction_requests import (
    DiscardWrite,
    DueRecheck,
    ProviderEventWrite,
    SettleWrite,
    record_params,
)


class PostgresProviderWrites:
    _sql: PostgresExecutor

    async def settle_write(self, request: SettleWrite) -> Row | None:
        return await self._sql.write_one("job_settle", **record_params(request))

    async def discard_write(self, request: DiscardWrite) -> bool:
        params = record_params(request)
        return await self._sql.write_one("job_discard_late_result", **params) is not None

    async def provider_event_write(self, request: ProviderEventWrite) -> tuple[bool, bool]:
        row = await self._sql.write_one("provider_event_record", **record_params(request))
        assert row is not None
        return bool(row["inserted"]), bool(row["due"])

    async def notify_reconcilers(self) -> None:
        await self._sql.write("notify_reconcile")

    async def recheck_due(self, request: DueRecheck) -> bool:
        due = await self._sql.write(
            "job_reconcile_if_event",
            provider=request.provider,
            provider_job_id=request.provider_job_id,
            now=self._sql.codec.now(request.now),
        )
        return bool(due)
