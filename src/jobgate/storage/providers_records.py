"""Records of the provider store: background jobs as the reconciler sees them, settlements,
and the answer to an inbound provider event."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from jobgate.domain.job import Job, JSONObject
from jobgate.domain.states import JobState


@dataclasses.dataclass(frozen=True, slots=True)
class BackgroundJob:
    """A job whose work runs at a provider, with the reconciler's bookkeeping."""

    job: Job
    provider_status: str | None
    reconciled_at: datetime | None  # when a reconciler last took it
    reconcile_checks: int  # status checks so far (drives the backoff)
    reconcile_failures: int  # consecutive failed checks or failed completion handling
    reconcile_error: JSONObject | None  # the last failure: {kind, code, message}
    cancel_sent_at: datetime | None  # when the provider was asked to cancel
    # Set by a reconcile claim, from the database's clock (the host's may be skewed): the
    # claim's time, and whether the job's execution deadline had passed by then.
    checked_at: datetime | None = None
    overdue: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Settlement:
    """The provider's verdict on a background job, applied only while the job is still running
    at that provider (fenced on the provider job id, no lease)."""

    job_id: str
    provider_job_id: str
    state: JobState  # succeeded | failed | cancelled | queued (a new attempt)
    reason: str
    actor: str
    provider_status: str | None = None
    result: JSONObject | None = None
    error: JSONObject | None = None
    usage: JSONObject | None = None  # {"input_tokens", "output_tokens", ...}: billed once
    cancel_outcome: str | None = None
    dead_lettered: bool = False
    retry_in_s: float = 0.0
    count_attempt: bool = True
    # Cancelled locally while the provider goes on (cancel not supported): keep checking on
    # it so that its result, when it comes, is discarded and refunded.
    watch_in_s: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ReconcileDeferral:
    """Not settled this time: when to look again, and what was learnt."""

    job_id: str
    provider_job_id: str
    reconcile_in_s: float
    provider_status: str | None = None
    failure: JSONObject | None = None  # a failed check: {kind, code, message}
    cancel_sent: bool = False
    progress: float | None = None  # the fraction done the provider reported, if any


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderEventOutcome:
    duplicate: bool  # the event id was seen before: acknowledged, not processed again
    job: Job | None  # the job the event is about, if known yet
