"""Verdicts: what a lease holder, the reaper or the reconciler writes when a job's attempt ends.

Every role that ends an attempt decides here, so that one condition gets one verdict and one
error body whoever noticed it (a deadline is `deadline_exceeded` / `timeout_error` for the
worker, the reaper and the reconciler alike). Pure: no I/O, no clock, no logging; a role that
fails a job as poison logs the returned `Poisoning` itself (`services.poison_log`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Literal

from jobgate import errors
from jobgate.domain import frozen
from jobgate.domain.job import CancelOutcome, Job, JSONObject, Lease
from jobgate.domain.states import JobState

# Given the attempt just ended (1-based), the seconds to wait before the job is claimable again.
RetryDelay = Callable[[int], float]
# Given the wait a provider asked for, the wait to keep (it may add jitter, never take any off).
RateLimitWait = Callable[[float], float]

# A rate limit requeues a job without counting the attempt, but only so many times in a row
# (counted as `run_count - attempt`: every claim not counted): past that, each one counts, so
# that a provider answering rate limits forever cannot keep a job going forever.
MAX_UNCOUNTED_RETRIES = 10
# The shortest wait after a rate limit, whatever the provider said (`retry-after: 0`, or a
# stream's error naming no wait): at most one call a second from one job.
RATE_LIMIT_MIN_WAIT_S = 1.0

# What to do with a create whose outcome is unknown (JOBGATE_UNKNOWN_OUTCOME).
UnknownOutcomePolicy = Literal["retry", "fail"]

# -- error codes (`error.code`): the condition ---------------------------------------------------
DEADLINE_EXCEEDED = "deadline_exceeded"
WORKER_LOST = "worker_lost"
WORKER_LOST_REPEATEDLY = "worker_lost_repeatedly"
POISON_JOB = "poison_job"
CREATION_OUTCOME_UNKNOWN = "creation_outcome_unknown"
PROVIDER_JOB_NOT_FOUND = "provider_job_not_found"
INTERNAL_ERROR = "internal_error"
OUTPUT_NOT_STORED = "output_not_stored"

# -- error types (`error.type`): the family of the condition, the same for every role -----------
JOB_ERROR = "job_error"  # jobgate's own verdict on the job (lost worker, poison)
TIMEOUT_ERROR = "timeout_error"  # the job ran past its execution deadline
SERVER_ERROR = "server_error"
RATE_LIMIT_ERROR = "rate_limit_error"
INVALID_REQUEST_ERROR = "invalid_request_error"
INSUFFICIENT_QUOTA = "insufficient_quota"
PROVIDER_ERROR = "provider_error"  # any other provider failure

# The most specific class wins: ProviderQuotaExceeded is a ProviderFatal.
_PROVIDER_ERROR_TYPES: tuple[tuple[type[errors.ProviderError], str], ...] = (
    (errors.ProviderQuotaExceeded, INSUFFICIENT_QUOTA),
    (errors.ProviderRetryable, SERVER_ERROR),
    (errors.ProviderRateLimited, RATE_LIMIT_ERROR),
    (errors.ProviderFatal, INVALID_REQUEST_ERROR),
)


@frozen.record  # built once per job by the worker
class Finish:
    """A lease holder's verdict on its job; applied only while the lease token still matches."""

    lease: Lease
    state: JobState  # succeeded | failed | cancelled | queued (a retry)
    reason: str
    result: JSONObject | None = None
    error: JSONObject | None = None
    usage: JSONObject | None = None  # {"input_tokens", "output_tokens", ...}
    retry_in_s: float = 0.0  # for a retry: delay before the job is claimable again
    count_attempt: bool = True  # False: the attempt is refunded (rate limit, shutdown)
    dead_lettered: bool = False
    cancel_outcome: str | None = None
    creation_outcome: str | None = None
    actor: str = "worker"
    lost: bool = False  # the reaper's verdict on a worker that stopped heartbeating
    provider_request_id: str | None = None  # the attempt's `x-request-id` / `request-id`


@dataclasses.dataclass(frozen=True, slots=True)
class Poisoning:
    """A job a role failed alone as `poison_job`: what its log line says (the traceback is
    taken from `exc`, which is None when the row itself was unreadable)."""

    job_id: str
    detail: str
    exc: BaseException | None = None


# -- error bodies -------------------------------------------------------------------------------


def error_body(code: str, message: str, *, kind: str = JOB_ERROR) -> dict[str, str]:
    """A job's `error`: `code` names the condition, `type` its family."""
    return {"code": code, "message": message, "type": kind}


def error_type_of(exc: errors.ProviderError) -> str:
    """The `error.type` of a provider error, by the class the adapter gave it."""
    for cls, kind in _PROVIDER_ERROR_TYPES:
        if isinstance(exc, cls):
            return kind
    return PROVIDER_ERROR


def provider_error_body(exc: errors.ProviderError) -> JSONObject:
    """A provider error as the job's `error`, with the provider's status and request id."""
    error: JSONObject = error_body(exc.code, exc.message, kind=error_type_of(exc))
    if exc.status_code is not None:
        error["status_code"] = exc.status_code
    if exc.request_id is not None:
        error["request_id"] = exc.request_id  # the provider's id, for its support
    return error


def deadline_error() -> dict[str, str]:
    """The error of a job that ran past its execution deadline, whoever noticed it."""
    return error_body(
        DEADLINE_EXCEEDED, "the job ran past its execution deadline", kind=TIMEOUT_ERROR
    )


def poison_error(detail: str) -> dict[str, str]:
    return error_body(POISON_JOB, f"the job cannot be handled: {detail}")


# -- poison ---------------------------------------------------------------------------------------


def poison_detail(job: Job, exc: BaseException | None = None) -> str:
    """Why a job cannot be handled, naming columns and exception types only: never a value
    (a stored value may be prompt content)."""
    if job.damaged:
        return f"stored values could not be read: {', '.join(job.damaged)}"
    kind = "unknown" if exc is None else type(exc).__name__
    return f"handling the job raised {kind}"


def poison_verdict(job: Job, detail: str, *, actor: str) -> Finish:
    """A lease holder's verdict on a job it cannot handle: failed for good, dead-lettered."""
    return poison_finish(
        Finish(lease=_lease(job), state=JobState.FAILED, reason="", actor=actor), detail
    )


def poison_finish(finish: Finish, detail: str) -> Finish:
    """In place of a verdict the database refused: `poison_job` under the same lease."""
    return Finish(
        lease=finish.lease,
        state=JobState.FAILED,
        reason=POISON_JOB,
        actor=finish.actor,
        dead_lettered=True,
        error=poison_error(detail),
    )


# -- the reaper: a running job whose lease expired (its worker is gone) ---------------------------


def reap_verdict_or_poison(
    job: Job, *, now: datetime, retry_delay: RetryDelay
) -> tuple[Finish, Poisoning | None]:
    """reap_verdict, except that a job the reaper cannot judge (damaged, or judging it raises)
    fails alone as `poison_job` instead of stopping the pass; the Poisoning is for the log."""
    if job.damaged:
        detail = poison_detail(job)
        return poison_verdict(job, detail, actor="reaper"), Poisoning(job.id, detail)
    try:
        return reap_verdict(job, now=now, retry_delay=retry_delay), None
    except Exception as exc:
        detail = poison_detail(job, exc)
        return poison_verdict(job, detail, actor="reaper"), Poisoning(job.id, detail, exc)


def reap_verdict(job: Job, *, now: datetime, retry_delay: RetryDelay) -> Finish:
    """What the reaper does with a running job whose lease expired (its worker is gone)."""
    lease = _lease(job)
    if job.cancel_requested_at is not None:
        return Finish(
            lease=lease,
            state=JobState.CANCELLED,
            reason="cancel_requested",
            actor="reaper",
            cancel_outcome=CancelOutcome.INTERRUPTED,
            lost=True,
        )
    if job.deadline_at is not None and job.deadline_at <= now:
        return Finish(
            lease=lease,
            state=JobState.FAILED,
            reason=DEADLINE_EXCEEDED,
            actor="reaper",
            error=deadline_error(),
            lost=True,
        )
    if climb(job).rung == "dead_letter":
        code = WORKER_LOST_REPEATEDLY if job.lost_count >= 1 else WORKER_LOST
        return Finish(
            lease=lease,
            state=JobState.FAILED,
            reason=code,
            actor="reaper",
            lost=True,
            dead_lettered=True,
            error=error_body(
                code,
                f"the worker running attempt {job.attempt} stopped "
                "heartbeating and no attempts remain",
            ),
        )
    return Finish(
        lease=lease,
        state=JobState.QUEUED,
        reason=WORKER_LOST,
        actor="reaper",
        lost=True,
        retry_in_s=retry_delay(job.attempt),
        error=error_body(
            WORKER_LOST, f"the worker running attempt {job.attempt} stopped heartbeating"
        ),
    )


# -- the retry ladder: every role that ends an attempt in failure climbs this one ---------------

# Reasons of the ladder's steps (a verdict's `reason`).
FATAL_ERROR = "fatal_error"
ATTEMPTS_EXHAUSTED = "attempts_exhausted"
RETRYABLE_ERROR = "retryable_error"
RATE_LIMITED = "rate_limited"

Rung = Literal["retry", "dead_letter", "fail"]


@dataclasses.dataclass(frozen=True, slots=True)
class Climb:
    """Where one failed attempt sends its job: `retry` (back to the queue; the attempt refunded
    when `count_attempt` is False), `dead_letter` (failed for good, kept for a redrive) or
    `fail` (failed for good: retrying cannot help)."""

    rung: Rung
    count_attempt: bool = True


def ladder(
    *, attempt: int, max_attempts: int, run_count: int, fatal: bool, rate_limited: bool
) -> Climb:
    """The one retry ladder, from the numbers and the error's class. A fatal error fails. A rate
    limit is not a failed attempt: it retries uncounted while fewer than MAX_UNCOUNTED_RETRIES
    claims in a row went uncounted (`run_count - attempt`), and counts after that, so that
    max_attempts bounds a job that is rate limited for good. A counted failure of the last
    attempt (`attempt >= max_attempts`) dead-letters; any other retries, counted."""
    if fatal:
        return Climb("fail")
    counted = not rate_limited or run_count - attempt >= MAX_UNCOUNTED_RETRIES
    if counted and attempt >= max_attempts:
        return Climb("dead_letter")
    return Climb("retry", count_attempt=counted)


def climb(job: Job, exc: errors.ProviderError | None = None) -> Climb:
    """The ladder for the attempt of `job` that just ended with `exc` (None: a failure of
    jobgate's own, retried like a server error: a lost worker, an output not stored)."""
    return ladder(
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        run_count=job.run_count,
        fatal=isinstance(exc, errors.ProviderFatal),
        rate_limited=isinstance(exc, errors.ProviderRateLimited),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """Where a failed attempt sends its job, as a verdict writes it: back to the queue after
    `retry_in_s` (the attempt refunded when `count_attempt` is False), failed and
    dead-lettered, or failed (`fatal_error`)."""

    state: JobState  # queued | failed
    reason: str
    retry_in_s: float = 0.0
    count_attempt: bool = True
    dead_lettered: bool = False


def attempts_exhausted(job: Job) -> bool:
    """Whether a counted failure of the attempt that just ended leaves none (the ladder
    dead-letters it)."""
    return climb(job).rung == "dead_letter"


def rate_limit_counts(job: Job) -> bool:
    """Whether a rate-limited run of `job` counts as an attempt (the ladder's bound on
    uncounted rate limits in a row)."""
    return ladder(
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        run_count=job.run_count,
        fatal=False,
        rate_limited=True,
    ).count_attempt


def retry_step(
    job: Job,
    exc: errors.ProviderError,
    *,
    retry_delay: RetryDelay,
    rate_limit_wait: RateLimitWait | None = None,
) -> Step:
    """The ladder's step for a provider error, whoever saw it (the worker on its call, the
    reconciler on a background job's answer): a fatal error fails; a rate limit waits at least
    the provider's wait (RATE_LIMIT_MIN_WAIT_S, then `rate_limit_wait`); any other retry waits
    `retry_delay`; a dead letter keeps the job for a redrive."""
    step = climb(job, exc)
    if step.rung == "fail":
        return Step(JobState.FAILED, FATAL_ERROR)
    if step.rung == "dead_letter":
        return Step(JobState.FAILED, ATTEMPTS_EXHAUSTED, dead_lettered=True)
    if isinstance(exc, errors.ProviderRateLimited):
        wait_s = max(RATE_LIMIT_MIN_WAIT_S, exc.retry_after_s)
        wait_s = max(wait_s, rate_limit_wait(wait_s)) if rate_limit_wait else wait_s
        return Step(
            JobState.QUEUED, RATE_LIMITED, retry_in_s=wait_s, count_attempt=step.count_attempt
        )
    return Step(JobState.QUEUED, RETRYABLE_ERROR, retry_in_s=retry_delay(job.attempt))


# -- the worker: each way a provider call can end -------------------------------------------------


def succeeded(
    job: Job,
    *,
    actor: str,
    result: JSONObject,
    usage: JSONObject,
    request_id: str | None = None,
) -> Finish:
    return Finish(
        lease=_lease(job),
        state=JobState.SUCCEEDED,
        reason="completed",
        actor=actor,
        result=result,
        usage=usage,
        provider_request_id=request_id,
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
        reason=DEADLINE_EXCEEDED,
        actor=actor,
        error=deadline_error(),
    )


def failed(
    job: Job,
    exc: errors.ProviderError,
    *,
    actor: str,
    retry_delay: RetryDelay,
    unknown_outcome: UnknownOutcomePolicy,
    rate_limit_wait: RateLimitWait | None = None,
) -> Finish:
    """Retry, reschedule or fail, by the class the adapter gave the error."""
    error = provider_error_body(exc)
    lease = _lease(job)
    creation_outcome = None
    if isinstance(exc, errors.ProviderOutcomeUnknown):
        creation_outcome = "unknown"
        # A provider that deduplicates by our idempotency key makes the retry safe: the
        # create is sent again and answers the original. Otherwise the policy decides.
        if unknown_outcome == "fail" and not exc.safe_to_retry:
            # A retry might run (and bill) the call twice: fail loudly instead.
            return Finish(
                lease=lease,
                state=JobState.FAILED,
                reason=CREATION_OUTCOME_UNKNOWN,
                actor=actor,
                error=error,
                creation_outcome=creation_outcome,
            )
    step = retry_step(job, exc, retry_delay=retry_delay, rate_limit_wait=rate_limit_wait)
    return Finish(
        lease=lease,
        state=step.state,
        reason=step.reason,
        actor=actor,
        error=error,
        retry_in_s=step.retry_in_s,
        count_attempt=step.count_attempt,
        dead_lettered=step.dead_lettered,
        creation_outcome=creation_outcome,
    )


def internal_error(
    job: Job,
    exc: BaseException,
    *,
    actor: str,
    retry_delay: RetryDelay,
    unknown_outcome: UnknownOutcomePolicy,
) -> Finish:
    """A bug in jobgate or an adapter: retried like a server error, never silently lost."""
    wrapped = errors.ProviderRetryable(
        f"internal error while running the job ({type(exc).__name__})", code=INTERNAL_ERROR
    )
    return failed(
        job, wrapped, actor=actor, retry_delay=retry_delay, unknown_outcome=unknown_outcome
    )


def output_not_stored(job: Job, *, actor: str, retry_delay: RetryDelay) -> Finish:
    """The database refused a streaming job's live output for a reason a retry of the write
    cannot mend: the attempt fails (counted, so the attempts bound it) rather than leave a
    stored answer that its output log does not match."""
    error = error_body(
        OUTPUT_NOT_STORED, "the database refused to store the job's live output (see the logs)"
    )
    lease = _lease(job)
    if climb(job).rung == "dead_letter":
        return Finish(
            lease=lease,
            state=JobState.FAILED,
            reason=OUTPUT_NOT_STORED,
            actor=actor,
            error=error,
            dead_lettered=True,
        )
    return Finish(
        lease=lease,
        state=JobState.QUEUED,
        reason=OUTPUT_NOT_STORED,
        actor=actor,
        error=error,
        retry_in_s=retry_delay(job.attempt),
    )


def died_mid_create(job: Job, *, actor: str) -> Finish:
    """A create whose worker stopped between sending it and recording the answer, under
    JOBGATE_UNKNOWN_OUTCOME=fail: the provider may be running it, so it is not sent again."""
    return Finish(
        lease=_lease(job),
        state=JobState.FAILED,
        reason=CREATION_OUTCOME_UNKNOWN,
        actor=actor,
        creation_outcome="unknown",
        error=error_body(
            CREATION_OUTCOME_UNKNOWN,
            "a worker stopped after sending the create to the provider and before "
            "recording its answer; the provider may be running the job, so it is not "
            "sent again (JOBGATE_UNKNOWN_OUTCOME=fail)",
            kind=PROVIDER_ERROR,
        ),
    )


# -- a verdict as storage applies it --------------------------------------------------------------


def as_applied(
    state: JobState, reason: str, cancel_outcome: str | None, *, cancel_requested: bool
) -> tuple[JobState, str, str | None]:
    """The (state, reason, cancel outcome) a verdict leaves on its job: a retry (whoever sent
    it: a worker, the reaper, the reconciler) of a job whose cancel was requested is the
    cancellation instead (`interrupted`), so that nothing starts again after a cancel arrived.

    The oracle, not the enforcer: storage applies this rule inside the write (the SQL fragment
    `retry_unless_cancelled`, one per dialect). A verdict is decided from the row as it was
    claimed, a cancel request may commit between that read and the write, and only the row as
    the write locks it knows; deciding here would take the row read again under that lock, a
    round trip more for every verdict. tests/storage/test_cancel_rule_contract.py holds both
    dialects, through finish and settle, to this function."""
    if state is JobState.QUEUED and cancel_requested:
        return JobState.CANCELLED, "cancel_requested", CancelOutcome.INTERRUPTED
    return state, reason, cancel_outcome


# -- redrive --------------------------------------------------------------------------------------


def redrive_refused(job: Job) -> errors.Conflict:
    """Why an existing job of the tenant could not be redriven (the database refused it)."""
    if job.purged_at is not None:
        # Its input is gone: a redrive would send the provider an empty request.
        return errors.Conflict(
            f"job {job.id} was purged (its input is erased); it cannot be retried: submit it again",
            code="job_purged",
        )
    return errors.Conflict(
        f"job {job.id} is not dead-lettered; only dead-lettered jobs can be retried",
        code="job_not_dead_lettered",
    )


def _lease(job: Job) -> Lease:
    return Lease(job.id, job.lease_token or "")
