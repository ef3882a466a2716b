"""What the reconciler writes for each answer of a provider about a background job (the
counterpart of `outcomes`, which holds the worker's verdicts)."""

from __future__ import annotations

import dataclasses
import random

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain.backoff import full_jitter_s, jittered_wait_s
from jobgate.domain.job import CancelOutcome, Job
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import (
    FATAL_ERROR,
    POISON_JOB,
    PROVIDER_ERROR,
    PROVIDER_JOB_NOT_FOUND,
    deadline_error,
    error_body,
    error_type_of,
    poison_error,
    retry_step,
)
from jobgate.providers.background import Snapshot, Status
from jobgate.providers.base import ProviderResult
from jobgate.storage.records import Settlement

ACTOR = "reconciler"


def from_snapshot(
    job: Job,
    snapshot: Snapshot,
    result: ProviderResult | None,
    *,
    cancel_wanted: bool,
    settings: Settings,
    rng: random.Random | None = None,
) -> Settlement:
    """The verdict for a terminal snapshot. A cancel that came too late keeps the real
    outcome; a failure at the provider climbs the worker's retry ladder (`verdicts.retry_step`;
    a fatal one fails as `failed_at_provider`; the rate limit's wait is jittered as the
    worker's is, so that jobs told to come back at one moment come back spread out), a retry
    being a new attempt created anew."""
    base = Settlement(
        job_id=job.id,
        provider_job_id=snapshot.provider_job_id,
        state=JobState.SUCCEEDED,
        reason="completed",
        actor=ACTOR,
        provider_status=snapshot.status,
        result=None if result is None else result.body,
        usage=None if result is None else result.usage.as_dict(),
        cancel_outcome=CancelOutcome.TOO_LATE if cancel_wanted else None,
    )
    if snapshot.status in (Status.COMPLETED, Status.INCOMPLETE):
        return base
    if snapshot.status == Status.CANCELLED:
        return dataclasses.replace(
            base,
            state=JobState.CANCELLED,
            reason="cancel_requested" if cancel_wanted else "cancelled_at_provider",
            cancel_outcome=CancelOutcome.AT_PROVIDER,
        )
    exc = snapshot.error or errors.ProviderFatal("the provider reports the job failed")
    error = error_body(exc.code, exc.message, kind=error_type_of(exc))
    failed = dataclasses.replace(
        base, state=JobState.FAILED, reason="failed_at_provider", error=error, result=None
    )
    if cancel_wanted:
        return failed
    step = retry_step(
        job,
        exc,
        retry_delay=lambda attempt: full_jitter_s(
            attempt, base_s=settings.retry_base_s, cap_s=settings.retry_max_s, rng=rng
        ),
        rate_limit_wait=lambda wait_s: jittered_wait_s(wait_s, rng=rng),
    )
    if step.reason == FATAL_ERROR:
        return failed
    return dataclasses.replace(
        failed,
        state=step.state,
        reason=step.reason,
        retry_in_s=step.retry_in_s,
        count_attempt=step.count_attempt,
        dead_lettered=step.dead_lettered,
    )


def cancelled_locally(job: Job, *, watch_in_s: float) -> Settlement:
    """The provider cannot cancel: cancelled here, its job watched so that its result is
    discarded (and refunded) when it comes."""
    return Settlement(
        job_id=job.id,
        provider_job_id=job.provider_job_id or "",
        state=JobState.CANCELLED,
        reason="cancel_requested",
        actor=ACTOR,
        cancel_outcome=CancelOutcome.NOT_SUPPORTED,
        watch_in_s=watch_in_s,
    )


def deadline_exceeded(job: Job, snapshot: Snapshot) -> Settlement:
    return Settlement(
        job_id=job.id,
        provider_job_id=snapshot.provider_job_id,
        state=JobState.FAILED,
        reason="deadline_exceeded",
        actor=ACTOR,
        provider_status=snapshot.status,
        error=deadline_error(),
    )


def lost(job: Job, exc: errors.ProviderError) -> Settlement:
    """The provider keeps saying it has no such job: failed (never created again)."""
    return Settlement(
        job_id=job.id,
        provider_job_id=job.provider_job_id or "",
        state=JobState.FAILED,
        reason=PROVIDER_JOB_NOT_FOUND,
        actor=ACTOR,
        error=error_body(
            PROVIDER_JOB_NOT_FOUND,
            f"the provider no longer knows job {job.provider_job_id} ({exc.message})",
            kind=PROVIDER_ERROR,
        ),
    )


def poison(job: Job, detail: str) -> Settlement:
    """A background job the reconciler cannot handle: failed for good, dead-lettered (the
    provider's job, if it still runs, is no longer watched)."""
    return Settlement(
        job_id=job.id,
        provider_job_id=job.provider_job_id or "",
        state=JobState.FAILED,
        reason=POISON_JOB,
        actor=ACTOR,
        dead_lettered=True,
        error=poison_error(detail),
    )


def state_of(snapshot: Snapshot) -> JobState:
    """The state a terminal snapshot would put a job in."""
    if snapshot.status in (Status.COMPLETED, Status.INCOMPLETE):
        return JobState.SUCCEEDED
    if snapshot.status == Status.CANCELLED:
        return JobState.CANCELLED
    return JobState.FAILED


def failure(kind: str, code: str, message: str) -> dict[str, str]:
    """A failed check as recorded on the job (reconcile_error)."""
    return {"kind": kind, "code": code, "message": message[:500]}
