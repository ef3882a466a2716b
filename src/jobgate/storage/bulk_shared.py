"""What both backends do around a bulk chunk: the filter as named parameters, and waking this
process's waiters once the chunk has committed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.states import JobState
from jobgate.storage.changes import ChangeHub


def filter_params(
    where: JobFilter,
    action: BulkAction,
    *,
    time: Callable[[datetime | None], Any],
    json: Callable[[Any], Any],
) -> dict[str, Any]:
    """The filter's named parameters; each dialect says how times and JSON travel."""
    return {
        "tenant_id": where.tenant_id,
        "states": None if where.states is None else json([str(s) for s in where.states]),
        "provider": where.provider,
        "model": where.model,
        "error_code": where.error_code,
        "created_after": time(where.created_after),
        "created_before": time(where.created_before),
        "metadata": None if where.metadata is None else json(dict(where.metadata)),
        "dead_lettered": where.dead_lettered,
        "action": str(action),
    }


def publish(changes: ChangeHub, action: BulkAction, changed: Sequence[tuple[str, str]]) -> None:
    """Wake this process's waiters after a committed chunk of (job id, new state)."""
    if not changed:
        return
    changes.jobs_changed(job_id for job_id, _ in changed)
    if action is BulkAction.REDRIVE:
        changes.work_available()
        return
    running = [job_id for job_id, state in changed if state == JobState.RUNNING]
    if running:
        changes.cancel_requested(running)
    changes.outbox_available()
