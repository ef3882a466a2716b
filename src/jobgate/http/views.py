"""JSON views of records, as the native API shows them (times in Unix seconds)."""

from __future__ import annotations

from typing import Any

from jobgate.clock import to_unix
from jobgate.domain.job import Job, JobEvent


def job_view(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "object": "job",
        "status": str(job.state),
        "provider": job.provider,
        "endpoint": job.endpoint,
        "model": job.model,
        "created_at": to_unix(job.created_at),
        "started_at": to_unix(job.started_at),
        "completed_at": to_unix(job.completed_at),
        "cancel_requested_at": to_unix(job.cancel_requested_at),
        "expires_at": to_unix(job.expires_at),
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "priority": job.priority,
        "phase": job.phase,
        "provider_job_id": job.provider_job_id,
        "provider_request_id": job.provider_request_id,
        "creation_outcome": job.creation_outcome,
        "cancel_outcome": job.cancel_outcome,
        "progress": job.progress,
        "run_at": to_unix(job.run_at),
        "concurrency_key": job.concurrency_key,
        "last_checked_at": to_unix(job.reconciled_at),
        "result": job.result,
        "error": job.error,
        "usage": job.usage,
        "metadata": job.metadata,
        "dead_lettered": job.dead_lettered,
        "purged": job.purged_at is not None,
    }


def event_view(event: JobEvent) -> dict[str, Any]:
    return {
        "object": "job.event",
        "job_id": event.job_id,
        "seq": event.seq,
        "from": None if event.from_state is None else str(event.from_state),
        "to": str(event.to_state),
        "actor": event.actor,
        "reason": event.reason,
        "applied": event.applied,
        "created_at": to_unix(event.created_at),
    }
