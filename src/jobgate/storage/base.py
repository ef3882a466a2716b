"""What the two SQL backends share beyond SQL: the single-item and release wrappers around the
fenced batch finish, publishing a batch's changes to this process's wake-up hub, and a bulk
filter's parameters."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from jobgate import errors
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import Finish, Finished


class SqlStorageBase(SqlPart):
    async def job_finish_many(
        self, *, finishes: Sequence[Finish], now: datetime | None = None
    ) -> list[Finished | None]:
        raise NotImplementedError

    async def _job_finish_read(self, *, finish: Finish, now: datetime | None) -> Job | None:
        """Apply one fenced verdict and read the job back in the same transaction (None, and
        nothing written, when the lease is lost); publishes the change."""
        raise NotImplementedError

    async def job_finish(self, *, finish: Finish, now: datetime | None = None) -> Job:
        job = await self._job_finish_read(finish=finish, now=now)
        if job is None:
            raise errors.LeaseLost(finish.lease.job_id)
        return job

    async def job_release(
        self, *, leases: Sequence[Lease], reason: str, now: datetime | None = None
    ) -> list[str]:
        finishes = [
            Finish(lease=lease, state=JobState.QUEUED, reason=reason, count_attempt=False)
            for lease in leases
        ]
        results = await self.job_finish_many(finishes=finishes, now=now)
        return [done.job_id for done in results if done is not None]

    def _published(self, finished: Sequence[Finished | None]) -> None:
        """Wake this process's waiters after a commit (other processes hear NOTIFY, on
        PostgreSQL; on SQLite they poll)."""
        changed = [done for done in finished if done is not None]
        if changed:
            self.changes.jobs_changed(done.job_id for done in changed)
            if any(done.state is JobState.QUEUED for done in changed):
                self.changes.work_available()
            self.changes.outbox_available()

    def _bulk_published(self, action: BulkAction, changed: Sequence[tuple[str, str]]) -> None:
        """Wake this process's waiters after a committed bulk chunk of (job id, new state)."""
        if not changed:
            return
        self.changes.jobs_changed(job_id for job_id, _ in changed)
        if action is BulkAction.REDRIVE:
            self.changes.work_available()
            return
        running = [job_id for job_id, state in changed if state == JobState.RUNNING]
        if running:
            self.changes.cancel_requested(running)
        self.changes.outbox_available()


def bulk_filter_params(
    where: JobFilter,
    action: BulkAction,
    *,
    time: Callable[[datetime | None], Any],
    json: Callable[[Any], Any],
) -> dict[str, Any]:
    """A bulk filter's named parameters; each dialect says how times and JSON travel."""
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
