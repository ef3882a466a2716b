"""What both SQL backends share: deciding a reaped job's fate and the single-item wrappers."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate import errors
from jobgate.domain import costs
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.storage.records import Finish, Finished, LimitOverrides, ReapResult, RetryDelay

log = logging.getLogger(__name__)

WORKER_LOST = "worker_lost"
WORKER_LOST_REPEATEDLY = "worker_lost_repeatedly"
POISON_JOB = "poison_job"


def poison_detail(job: Job, exc: BaseException | None = None) -> str:
    """Why a job cannot be handled, naming columns and exception types only: never a value
    (a stored value may be prompt content)."""
    if job.damaged:
        return f"stored values could not be read: {', '.join(job.damaged)}"
    kind = "unknown" if exc is None else type(exc).__name__
    return f"handling the job raised {kind}"


def traceback_text(exc: BaseException) -> str:
    """The traceback's frames and the exception's type, without its message (which may quote
    a stored value)."""
    frames = "".join(traceback.format_tb(exc.__traceback__))
    return f"Traceback (most recent call last):\n{frames}{type(exc).__qualname__}"


def log_poison(role: str, job_id: str, detail: str, exc: BaseException | None = None) -> None:
    """The log line of a job failed alone as `poison_job`."""
    log.error(
        "poison job failed alone",
        extra={
            "role": role,
            "job_id": job_id,
            "error_code": POISON_JOB,
            "detail": detail,
            "traceback": None if exc is None else traceback_text(exc),
        },
    )


def poison_verdict(job: Job, detail: str, *, actor: str) -> Finish:
    """A lease holder's verdict on a job it cannot handle: failed for good, dead-lettered."""
    lease = Lease(job.id, job.lease_token or "")
    return poison_finish(Finish(lease=lease, state=JobState.FAILED, reason="", actor=actor), detail)


def poison_finish(finish: Finish, detail: str) -> Finish:
    """In place of a verdict the database refused: `poison_job` under the same lease."""
    return Finish(
        lease=finish.lease,
        state=JobState.FAILED,
        reason=POISON_JOB,
        actor=finish.actor,
        dead_lettered=True,
        error=error_body(POISON_JOB, f"the job cannot be handled: {detail}"),
    )


def reap_verdict_or_poison(job: Job, *, now: datetime, retry_delay: RetryDelay) -> Finish:
    """reap_verdict, except that a job the reaper cannot judge (damaged, or judging it raises)
    fails alone as `poison_job` instead of stopping the pass."""
    if job.damaged:
        detail = poison_detail(job)
        log_poison("reaper", job.id, detail)
        return poison_verdict(job, detail, actor="reaper")
    try:
        return reap_verdict(job, now=now, retry_delay=retry_delay)
    except Exception as exc:
        detail = poison_detail(job, exc)
        log_poison("reaper", job.id, detail, exc)
        return poison_verdict(job, detail, actor="reaper")


def reap_verdict(job: Job, *, now: datetime, retry_delay: RetryDelay) -> Finish:
    """What the reaper does with a running job whose lease expired (its worker is gone)."""
    lease = Lease(job.id, job.lease_token or "")
    if job.cancel_requested_at is not None:
        return Finish(
            lease=lease,
            state=JobState.CANCELLED,
            reason="cancel_requested",
            actor="reaper",
            cancel_outcome="interrupted",
            lost=True,
        )
    if job.deadline_at is not None and job.deadline_at <= now:
        return Finish(
            lease=lease,
            state=JobState.FAILED,
            reason="deadline_exceeded",
            actor="reaper",
            error=error_body("deadline_exceeded", "the job ran past its execution deadline"),
            lost=True,
        )
    if job.attempt >= job.max_attempts:
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


def redrive_refused(job: Job) -> errors.Conflict:
    """Why an existing job of the tenant could not be redriven."""
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


def error_body(code: str, message: str, *, kind: str = "job_error") -> dict[str, str]:
    return {"code": code, "message": message, "type": kind}


def reap_result(finished: Sequence[Finished | None], verdicts: Sequence[Finish] = ()) -> ReapResult:
    result = ReapResult()
    poisoned = {v.lease.job_id for v in verdicts if v.reason == POISON_JOB}
    for done in finished:
        if done is None:
            continue
        if done.job_id in poisoned:
            result.poisoned.append(done.job_id)
        if done.state is JobState.QUEUED:
            result.requeued.append(done.job_id)
        elif done.state is JobState.CANCELLED:
            result.cancelled.append(done.job_id)
        else:
            result.failed.append(done.job_id)
    return result


def overrides_params(overrides: LimitOverrides) -> dict[str, Any]:
    """LimitOverrides as query parameters (lists stay lists: each dialect encodes JSON)."""
    return {
        "max_running": overrides.max_running,
        "max_queued": overrides.max_queued,
        "weight": overrides.weight,
        "allowed_models": None
        if overrides.allowed_models is None
        else list(overrides.allowed_models),
        "allowed_providers": None
        if overrides.allowed_providers is None
        else list(overrides.allowed_providers),
        "max_output_tokens": overrides.max_output_tokens,
        "daily_token_budget": overrides.daily_token_budget,
        "daily_cost_budget_usd": None
        if overrides.daily_cost_budget_usd is None
        else float(overrides.daily_cost_budget_usd),
        "max_running_per_key": overrides.max_running_per_key,
    }


def overrides_from_row(row: Any, decode_json: Any) -> LimitOverrides:
    models = decode_json(row["allowed_models"])
    providers = decode_json(row["allowed_providers"])
    return LimitOverrides(
        max_running=row["max_running"],
        max_queued=row["max_queued"],
        weight=row["weight"],
        allowed_models=None if models is None else tuple(models),
        allowed_providers=None if providers is None else tuple(providers),
        max_output_tokens=row["max_output_tokens"],
        daily_token_budget=row["daily_token_budget"],
        daily_cost_budget_usd=row["daily_cost_budget_usd"],
        max_running_per_key=row["max_running_per_key"],
    )


def usage_total_from_row(row: Any) -> costs.UsageTotal:
    return costs.UsageTotal(
        tenant_id=row["tenant_id"],
        provider=row["provider"],
        model=row["model"],
        input_tokens=int(row["input_tokens"] or 0),
        output_tokens=int(row["output_tokens"] or 0),
        cache_read_tokens=int(row["cache_read_tokens"] or 0),
        cache_write_tokens=int(row["cache_write_tokens"] or 0),
    )


def cache_tokens(usage: dict[str, Any]) -> dict[str, int]:
    """The prompt-cache tokens of a usage object, as the ledger's columns."""
    return {
        "cache_read_tokens": int(usage.get("cache_read_input_tokens") or 0),
        "cache_write_tokens": int(usage.get("cache_creation_input_tokens") or 0),
    }
