"""The provider store on PostgreSQL (see storage.providers_protocol)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

import asyncpg

from jobgate import errors
from jobgate.domain.job import Job, JSONObject, Lease
from jobgate.domain.states import JobState
from jobgate.storage.changes import ChangeHub
from jobgate.storage.records import (
    BackgroundJob,
    ProviderEventOutcome,
    ReconcileDeferral,
    Settlement,
)
from jobgate.storage.rows import RowDecoder, RowLike


class PostgresProviderStore:
    """Mixed into PostgresStorage, whose pool, decoder and change hub it uses."""

    _decode: RowDecoder
    changes: ChangeHub

    # Provided by PostgresStorage.
    _fetch: Callable[..., Awaitable[list[asyncpg.Record]]]
    _fetchrow: Callable[..., Awaitable[asyncpg.Record | None]]

    def _background(self, row: RowLike, *, claimed: bool = False) -> BackgroundJob:
        return BackgroundJob(
            job=self._decode.job(row),
            provider_status=row["provider_status"],
            reconciled_at=row["reconciled_at"],
            reconcile_checks=row["reconcile_checks"],
            reconcile_failures=row["reconcile_failures"],
            reconcile_error=row["reconcile_error"],
            cancel_sent_at=row["cancel_sent_at"],
            checked_at=row["checked_at"] if claimed else None,
            overdue=bool(row["overdue"]) if claimed else False,
        )

    async def _notify_reconcile(self) -> None:
        self.changes.reconcile_due()
        await self._fetch("notify_reconcile")

    async def job_provider_submitting(self, *, lease: Lease, now: datetime | None = None) -> None:
        row = await self._fetchrow(
            "job_provider_submitting", id=lease.job_id, token=lease.token, now=now
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
        row = await self._fetchrow(
            "job_background_accept",
            id=lease.job_id,
            token=lease.token,
            provider_job_id=provider_job_id,
            provider_status=provider_status,
            reconcile_in_s=reconcile_in_s,
            now=now,
        )
        if row is None:
            raise errors.LeaseLost(lease.job_id)
        job = self._decode.job(row)
        if row["due_now"]:
            await self._notify_reconcile()
        else:
            await self._due_if_event(job.provider, provider_job_id, now)
        return job

    async def _due_if_event(
        self, provider: str, provider_job_id: str, now: datetime | None
    ) -> bool:
        """The re-check of job_reconcile_if_event, after our own commit."""
        due = await self._fetch(
            "job_reconcile_if_event", provider=provider, provider_job_id=provider_job_id, now=now
        )
        if due:
            await self._notify_reconcile()
        return bool(due)

    async def job_reconcile_refresh(
        self, *, providers: Sequence[str] | None = None, now: datetime | None = None
    ) -> int:
        rows = await self._fetch(
            "job_reconcile_refresh",
            providers=None if providers is None else list(providers),
            now=now,
        )
        return len(rows)

    async def job_reconcile_claim(
        self,
        *,
        limit: int,
        lease_s: float,
        providers: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> list[BackgroundJob]:
        rows = await self._fetch(
            "job_reconcile_claim",
            limit=limit,
            lease_s=lease_s,
            providers=None if providers is None else list(providers),
            now=now,
        )
        claimed = [self._background(row, claimed=True) for row in rows]
        return sorted(claimed, key=lambda item: (item.job.created_at, item.job.id))

    async def job_reconcile_defer(
        self, *, deferral: ReconcileDeferral, now: datetime | None = None
    ) -> bool:
        row = await self._fetchrow(
            "job_reconcile_defer",
            id=deferral.job_id,
            provider_job_id=deferral.provider_job_id,
            reconcile_in_s=deferral.reconcile_in_s,
            provider_status=deferral.provider_status,
            failure=deferral.failure,
            cancel_sent=deferral.cancel_sent,
            progress=deferral.progress,
            now=now,
        )
        return row is not None

    async def job_settle(
        self, *, settlement: Settlement, now: datetime | None = None
    ) -> Job | None:
        s = settlement
        row = await self._fetchrow(
            "job_settle",
            id=s.job_id,
            provider_job_id=s.provider_job_id,
            state=str(s.state),
            result=s.result,
            error=s.error,
            usage=s.usage,
            refund_attempt=0 if s.count_attempt else 1,
            dead_lettered=s.dead_lettered,
            retry_in_s=s.retry_in_s,
            cancel_outcome=s.cancel_outcome,
            provider_status=s.provider_status,
            watch_in_s=s.watch_in_s,
            actor=s.actor,
            reason=s.reason,
            now=now,
        )
        if row is None:
            return None
        job = self._decode.job(row)
        self.changes.jobs_changed([job.id])
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
        row = await self._fetchrow(
            "job_discard_late_result",
            id=job_id,
            provider_job_id=provider_job_id,
            to_state=str(to_state),
            usage=usage,
            actor=actor,
            now=now,
        )
        return row is not None

    async def job_by_provider_job(
        self, *, provider: str, provider_job_id: str
    ) -> BackgroundJob | None:
        row = await self._fetchrow(
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
        row = await self._fetchrow(
            "provider_event_record",
            provider=provider,
            event_id=event_id,
            event_type=event_type,
            provider_job_id=provider_job_id,
            now=now,
        )
        assert row is not None
        if row["due"]:
            await self._notify_reconcile()
        elif row["inserted"] and provider_job_id is not None:
            await self._due_if_event(provider, provider_job_id, now)
        job = None
        if provider_job_id is not None:
            found = await self.job_by_provider_job(
                provider=provider, provider_job_id=provider_job_id
            )
            job = None if found is None else found.job
        return ProviderEventOutcome(duplicate=row["inserted"] == 0, job=job)

    async def provider_events_prune(self, *, before: datetime) -> int:
        row = await self._fetchrow("provider_events_prune", before=before)
        return 0 if row is None else int(row["count"])
