"""What a worker writes after an attempt: the verdict for each way a provider call can end."""

from __future__ import annotations

import random

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain.backoff import full_jitter_s
from jobgate.domain.job import CancelOutcome, Job, Lease
from jobgate.domain.states import JobState
from jobgate.providers.base import ProviderResult
from jobgate.storage.records import Finish
from jobgate.storage.shared import error_body

_ERROR_TYPES: dict[type[errors.ProviderError], str] = {
    errors.ProviderRetryable: "server_error",
    errors.ProviderRateLimited: "rate_limit_error",
    errors.ProviderFatal: "invalid_request_error",
    errors.ProviderQuotaExceeded: "insufficient_quota",
    errors.ProviderOutcomeUnknown: "provider_error",
}


def _lease(job: Job) -> Lease:
    return Lease(job.id, job.lease_token or "")


def succeeded(job: Job, result: ProviderResult, *, actor: str) -> Finish:
    return Finish(
        lease=_lease(job),
        state=JobState.SUCCEEDED,
        reason="completed",
        actor=actor,
        result=result.body,
        usage=result.usage.as_dict(),
        provider_request_id=result.request_id,
    )


def cancelled(job: Job, *, actor: str) -> Finish:
    return Finish(
        lease=_lease(job),
        state=JobState.CANCELLED,
        reason="cancel_requested",
        actor=actor,
        cancel_outcome=CancelOutcome.INTERRUPTED,
    )


def released(job: Job, *, actor: str) -> Finish:
    """Graceful shutdown: back to the queue at once, the attempt not counted."""
    return Finish(
        lease=_lease(job),
        state=JobState.QUEUED,
        reason="worker_shutdown",
        actor=actor,
        count_attempt=False,
    )


def deadline_exceeded(job: Job, *, actor: str) -> Finish:
    return Finish(
        lease=_lease(job),
        state=JobState.FAILED,
        reason="deadline_exceeded",
        actor=actor,
        error=error_body(
            "deadline_exceeded", "the job ran past its execution deadline", kind="timeout_error"
        ),
    )


def failed(
    job: Job,
    exc: errors.ProviderError,
    *,
    actor: str,
    settings: Settings,
    rng: random.Random | None = None,
) -> Finish:
    """Retry, reschedule or fail, by the class the adapter gave the error."""
    error = error_body(exc.code, exc.message, kind=_ERROR_TYPES.get(type(exc), "provider_error"))
    if exc.status_code is not None:
        error["status_code"] = exc.status_code  # type: ignore[assignment]
    if exc.request_id is not None:
        error["request_id"] = exc.request_id  # the provider's id, for its support
    lease = _lease(job)
    if isinstance(exc, errors.ProviderRateLimited):
        # The provider said when to come back: that is not a failed attempt.
        return Finish(
            lease=lease,
            state=JobState.QUEUED,
            reason="rate_limited",
            actor=actor,
            error=error,
            retry_in_s=max(0.0, exc.retry_after_s),
            count_attempt=False,
        )
    if isinstance(exc, errors.ProviderFatal):
        return Finish(
            lease=lease, state=JobState.FAILED, reason="fatal_error", actor=actor, error=error
        )
    creation_outcome = None
    if isinstance(exc, errors.ProviderOutcomeUnknown):
        creation_outcome = "unknown"
        # A provider that deduplicates by our idempotency key makes the retry safe: the
        # create is sent again and answers the original. Otherwise the policy decides.
        if settings.unknown_outcome == "fail" and not exc.safe_to_retry:
            # A retry might run (and bill) the call twice: fail loudly instead.
            return Finish(
                lease=lease,
                state=JobState.FAILED,
                reason="creation_outcome_unknown",
                actor=actor,
                error=error,
                creation_outcome=creation_outcome,
            )
    if job.attempt >= job.max_attempts:
        return Finish(
            lease=lease,
            state=JobState.FAILED,
            reason="attempts_exhausted",
            actor=actor,
            error=error,
            dead_lettered=True,
            creation_outcome=creation_outcome,
        )
    return Finish(
        lease=lease,
        state=JobState.QUEUED,
        reason="retryable_error",
        actor=actor,
        error=error,
        retry_in_s=full_jitter_s(
            job.attempt, base_s=settings.retry_base_s, cap_s=settings.retry_max_s, rng=rng
        ),
        creation_outcome=creation_outcome,
    )


def internal_error(
    job: Job,
    exc: BaseException,
    *,
    actor: str,
    settings: Settings,
    rng: random.Random | None = None,
) -> Finish:
    """A bug in jobgate or an adapter: retried like a server error, never silently lost."""
    wrapped = errors.ProviderRetryable(
        f"internal error while running the job ({type(exc).__name__})", code="internal_error"
    )
    return failed(job, wrapped, actor=actor, settings=settings, rng=rng)
