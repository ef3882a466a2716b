"""What every dialect's insert (Storage.job_insert) shares: a new job's stored columns, the job
an insert stored, and each keyed item's scope for domain.idempotency.decide."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jobgate.domain.idempotency import Scope
from jobgate.domain.job import Job, NewJob
from jobgate.storage.records import IdempotencyClaim
from jobgate.storage.rows import EARLIEST, LATEST, RowLike

_READ_ORDER = ("run_at", "created_at", "updated_at", "expires_at")  # as RowDecoder.job reads them
_CLAMPED = frozenset((LATEST, EARLIEST))


def new_job_fields(job: NewJob, json: Callable[[Any], Any]) -> dict[str, Any]:
    """The columns of a new job's row that are stored as given (`json`: how a JSON value
    travels); each dialect adds its times."""
    return {
        "id": job.id,
        "tenant_id": job.tenant_id,
        "api": job.api,
        "provider": job.provider,
        "endpoint": job.endpoint,
        "model": job.model,
        "request": json(job.request),
        "metadata": json(job.metadata),
        "webhook": json(job.webhook),
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "execution_timeout_s": job.execution_timeout_s,
        "concurrency_key": job.concurrency_key,
        "model_route": job.model_route,
    }


def stored_job(job: NewJob, times: RowLike) -> Job:
    """The job an insert stored, from the times it computed (`created_at`, `run_at` and
    `expires_at`, as the dialect's codec reads them): what job_get reads back, a time clamped
    to what Python holds named damaged as the row decoder names it."""
    run_at, created_at, expires_at = times["run_at"], times["created_at"], times["expires_at"]
    if _CLAMPED.isdisjoint((run_at, created_at, expires_at)):  # the usual job: no walk
        return job.queued(created_at=created_at, run_at=run_at, expires_at=expires_at)
    read = zip(_READ_ORDER, (run_at, created_at, created_at, expires_at), strict=True)
    damaged = tuple(name for name, moment in read if moment in _CLAMPED)
    return job.queued(created_at=created_at, run_at=run_at, expires_at=expires_at, damaged=damaged)


def scope(job: NewJob, claim: IdempotencyClaim) -> Scope:
    """Where a key is bound: per tenant and route."""
    return (job.tenant_id, claim.route, claim.key)


def key_uses(
    jobs: Sequence[NewJob], keys: Sequence[IdempotencyClaim | None]
) -> list[tuple[Scope, str] | None]:
    """Each item's key as domain.idempotency.decide takes it."""
    return [
        None if claim is None else (scope(job, claim), claim.body_hash)
        for job, claim in zip(jobs, keys, strict=True)
    ]
