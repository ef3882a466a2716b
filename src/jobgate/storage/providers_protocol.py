"""The provider store: what background mode, the reconciler and inbound provider webhooks
need from storage. Rules of `protocol.Storage` apply (one short transaction per method)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobgate.domain.job import Job, JSONObject, Lease
from jobgate.domain.states import JobState
from jobgate.storage.records import (
    BackgroundJob,
    ProviderEventOutcome,
    ReconcileDeferral,
    Settlement,
)


class ProviderStore(Protocol):
    async def job_provider_submitting(self, *, lease: Lease, now: datetime | None = None) -> None:
        """Fenced on the lease: a create is about to be sent (phase `submitting`,
        creation_outcome `sending`). If the worker dies before job_background_accept, the next
        run of the job sees `sending` and knows a provider job may exist. Raises
        errors.LeaseLost."""
        ...

    async def job_background_accept(
        self,
        *,
        lease: Lease,
        provider_job_id: str,
        provider_status: str | None,
        reconcile_in_s: float,
        now: datetime | None = None,
    ) -> Job:
        """Fenced on the lease: the provider accepted the job. Records its id (creation_outcome
        `accepted`, phase `awaiting_provider`), releases the lease (a job without a lease is
        never reaped) and schedules the first status check; at once if a provider event about
        that id already arrived or a cancel was requested. The state stays `running`: no
        event. Raises errors.LeaseLost."""
        ...

    async def job_reconcile_refresh(
        self, *, providers: Sequence[str] | None = None, now: datetime | None = None
    ) -> int:
        """Make every running job that has a provider id due for a check now (a reconciler
        starting up cannot know what it missed). Returns how many."""
        ...

    async def job_reconcile_claim(
        self,
        *,
        limit: int,
        lease_s: float,
        providers: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> list[BackgroundJob]:
        """Take up to `limit` background jobs due for a check: running at a provider with
        reconcile_at passed or a cancel request newer than their last check, or cancelled
        locally and still watched. Pushes each reconcile_at `lease_s` ahead (a reconciler that
        dies is replaced after that), so concurrent reconcilers never take the same job."""
        ...

    async def job_reconcile_defer(
        self, *, deferral: ReconcileDeferral, now: datetime | None = None
    ) -> bool:
        """Schedule the next check of a job still at the provider. A failed check (`failure`)
        counts in reconcile_failures and is kept in reconcile_error; a good one resets them.
        False when the job moved on (settled elsewhere): nothing is written."""
        ...

    async def job_settle(
        self, *, settlement: Settlement, now: datetime | None = None
    ) -> Job | None:
        """Apply the provider's verdict, fenced on (id, provider_job_id, running, no lease):
        the first verdict wins and a terminal job never moves. A success (or any verdict with
        usage) is billed once. To `queued`: a new attempt, the provider id cleared. None when
        the fence fails; the caller records the verdict as ignored."""
        ...

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
        """The provider finished a job jobgate had cancelled locally (cancel not supported):
        stop watching, log the result as ignored (it is discarded), and write the provider's
        usage as a `completion` entry with a matching `refund` (the tenant pays nothing). False
        when the job is not such a job."""
        ...

    async def job_by_provider_job(
        self, *, provider: str, provider_job_id: str
    ) -> BackgroundJob | None:
        """The job a provider's id belongs to."""
        ...

    async def provider_event_record(
        self,
        *,
        provider: str,
        event_id: str,
        event_type: str,
        provider_job_id: str | None,
        now: datetime | None = None,
    ) -> ProviderEventOutcome:
        """Insert an inbound event under its unique (provider, event id). A duplicate changes
        nothing. Otherwise the job it names, if running at that provider (or watched after a
        local cancel), becomes due for a check now: the settlement itself is the reconciler's,
        from the provider's authoritative answer."""
        ...

    async def provider_events_prune(self, *, before: datetime) -> int:
        """Forget provider events received before `before` (dedup needs only recent ones)."""
        ...
