"""PostgreSQL's own part of the provider store: waking reconcilers in other processes, and the
re-check that READ COMMITTED needs (see job_reconcile_if_event). SQLite has one writer and
wakes other processes by polling, so neither applies there."""

from __future__ import annotations

from datetime import datetime

from jobgate.storage.store.providers import ProviderQueries


class PostgresProviderStore(ProviderQueries):
    async def _wake_reconcilers(self) -> None:
        await super()._wake_reconcilers()
        await self._sql.write("notify_reconcile")

    async def _due_if_event(
        self, provider: str, provider_job_id: str, now: datetime | None
    ) -> None:
        due = await self._sql.write(
            "job_reconcile_if_event",
            provider=provider,
            provider_job_id=provider_job_id,
            now=self._sql.codec.now(now),
        )
        if due:
            await self._wake_reconcilers()
