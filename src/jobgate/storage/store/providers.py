"""The provider store over either dialect (see storage.protocol.ProviderStore): background jobs,
the reconciler's claims and settlements, and inbound provider events."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate import errors
from jobgate.domain.job import Job, JSONObject, Lease
from jobgate.domain.states import JobState
from jobgate.storage.executor import Row, SqlPart
from jobgate.storage.records import (
    BackgroundJob,
    ProviderEventOutcome,
    ReconcileDeferral,
    Settlement,
)
from jobgate.storage.transaction_requests import (
    DiscardWrite,
    DueRecheck,
    ProviderEventWrite,
    SettleWrite,
)


class ProviderQueries(SqlPart):
    def _background(self, row: Row, *, claimed: bool = False) -> BackgroundJob:
        time = self._sql.codec.time_out
        return BackgroundJob(
            job=self._decode.job(row),
            provider_status=row["provider_status"],
            reconciled_at=time(row["reconciled_at"]),
            reconcile_checks=row["reconcile_checks"],
            reconcile_failures=row["reconcile_failures"],
            reconcile_error=self._last_failure(row["reconcile_error"]),
            cancel_sent_at=time(row["cancel_sent_at"]),
            checked_at=time(row["checked_at"]) if claimed else None,
            overdue=bool(row["overdue"]) if claimed else False,
        )

    def _last_failure(self, value: Any) -> Any:
        """The last failed check, as recorded; unreadable JSON reads as none (it only informs)."""
        try:
            return self._sql.codec.json_out(value)
        except ValueError:
            return None

    async def _wake_reconcilers(self) -> None:
        """A background job is due now: wake the reconcilers, this process's and others'."""
        self.changes.reconcile_due()
        await self._tx.notify_reconcilers()

    async def _due_if_event(
        self, provider: str, provider_job_id: str, now: datetime | None
    ) -> None:
        if await self._tx.recheck_due(DueRecheck(provider, provider_job_id, now)):
            await self._wake_reconcilers()

    async def job_provider_submitting(self, *, lease: Lease, now: datetime | None = None) -> None:
        row = await self._sql.write_one(
            "job_provider_submitting",
            id=lease.job_id,
            token=lease.token,
            now=self._sql.codec.now(now),
        )
        if row is None:
            raise errors.LeaseLost(lease.job_id)

    async def job_background_accept(
        self,
        *,
        lease: Lease,
        provider_job_id: str,
        provider_status: str | None,
        reconcile_in_s: float,
        now: datetime | None = None,
    ) -> Job:
        row = await self._sql.write_one(
            "job_background_accept",
            id=lease.job_id,
            token=lease.token,
            provider_job_id=provider_job_id,
            provider_status=provider_status,
            reconcile_in_s=reconcile_in_s,
            now=self._sql.codec.now(now),
        )
        if row is None:
            raise errors.LeaseLost(lease.job_id)
        job = self._decode.job(row)
        if row["due_now"]:
            await self._wake_reconcilers()
        else:
            await self._due_if_event(job.provider, provider_job_id, now)
        return job

    async def job_reconcile_refresh(
        self, *, providers: Sequence[str] | None = None, now: datetime | None = None
    ) -> int:
        codec = self._sql.codec
        return await self._sql.write_count(
            "job_reconcile_refresh",
            providers=codec.json(None if providers is None else list(providers)),
            now=codec.now(now),
        )

    async def job_reconcile_claim(
        self,
        *,
        limit: int,
        lease_s: float,
        providers: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> list[BackgroundJob]:
        codec = self._sql.codec
        rows = await self._sql.write(
            "job_reconcile_claim",
            limit=limit,
            lease_s=lease_s,
            providers=codec.json(None if providers is None else list(providers)),
            now=codec.now(now),
        )
        claimed = [self._background(row, claimed=True) for row in rows]
        return sorted(claimed, key=lambda item: (item.job.created_at, item.job.id))

    async def job_reconcile_defer(
        self, *, deferral: ReconcileDeferral, now: datetime | None = None
    ) -> bool:
        codec = self._sql.codec
        row = await self._sql.write_one(
            "job_reconcile_defer",
            id=deferral.job_id,
            provider_job_id=deferral.provider_job_id,
            reconcile_in_s=deferral.reconcile_in_s,
            provider_status=deferral.provider_status,
            failure=codec.json(deferral.failure),
            cancel_sent=codec.flag(deferral.cancel_sent),
            progress=deferral.progress,
            now=codec.now(now),
        )
        return row is not None

    async def job_settle(
        self, *, settlement: Settlement, now: datetime | None = None
    ) -> Job | None:
        codec = self._sql.codec
        s = settlement
        row = await self._tx.settle_write(
            SettleWrite(
                id=s.job_id,
                provider_job_id=s.provider_job_id,
                state=str(s.state),
                result=codec.json(s.result),
                error=codec.json(s.error),
                usage=codec.json(s.usage),
                refund_attempt=0 if s.count_attempt else 1,
                dead_lettered=codec.flag(s.dead_lettered),
                retry_in_s=s.retry_in_s,
                cancel_outcome=s.cancel_outcome,
                provider_status=s.provider_status,
                watch_in_s=s.watch_in_s,
                actor=s.actor,
                reason=s.reason,
                now=codec.now(now),
            )
        )
        if row is None:
            return None
        job = self._decode.job(row)
        self.changes.jobs_changed([job.id])
        self.changes.outbox_available()
        if job.state is JobState.QUEUED:
            self.changes.work_available()
        return job

    async def job_discard_late_result(
        self,
        *,
        job_id: str,
        provider_job_id: str,
        to_state: JobState,
        usage: JSONObject | None,
        actor: str,
        now: datetime | None = None,
    ) -> bool:
        codec = self._sql.codec
        return await self._tx.discard_write(
            DiscardWrite(
                id=job_id,
                provider_job_id=provider_job_id,
                to_state=str(to_state),
                usage=codec.json(usage),
                actor=actor,
                now=codec.now(now),
            )
        )

    async def job_by_provider_job(
        self, *, provider: str, provider_job_id: str
    ) -> BackgroundJob | None:
        row = await self._sql.read_one(
            "job_by_provider_job", provider=provider, provider_job_id=provider_job_id
        )
        return None if row is None else self._background(row)

    async def provider_event_record(
        self,
        *,
        provider: str,
        event_id: str,
        event_type: str,
        provider_job_id: str | None,
        now: datetime | None = None,
    ) -> ProviderEventOutcome:
        inserted, due = await self._tx.provider_event_write(
            ProviderEventWrite(
                provider=provider,
                event_id=event_id,
                event_type=event_type,
                provider_job_id=provider_job_id,
                now=self._sql.codec.now(now),
            )
        )
        if due:
            await self._wake_reconcilers()
        elif inserted and provider_job_id is not None:
            await self._due_if_event(provider, provider_job_id, now)
        job = None
        if provider_job_id is not None:
            found = await self.job_by_provider_job(
                provider=provider, provider_job_id=provider_job_id
            )
            job = None if found is None else found.job
        return ProviderEventOutcome(duplicate=not inserted, job=job)

    async def provider_events_prune(self, *, before: datetime) -> int:
        return await self._sql.write_count(
            "provider_events_prune", before=self._sql.codec.time(before)
        )
