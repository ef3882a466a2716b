"""What the two SQL backends share beyond SQL: the single-item and release wrappers around the
fenced batch finish, and publishing a batch's changes to this process's wake-up hub."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate import errors
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.storage.changes import ChangeHub
from jobgate.storage.records import Finish


class SqlStorageBase:
    changes: ChangeHub

    async def job_finish_many(
        self, *, finishes: Sequence[Finish], now: datetime | None = None
    ) -> list[Job | None]:
        raise NotImplementedError

    async def job_finish(self, *, finish: Finish, now: datetime | None = None) -> Job:
        [job] = await self.job_finish_many(finishes=[finish], now=now)
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
        return [job.id for job in results if job is not None]

    def _published(self, jobs: Sequence[Job | None]) -> None:
        """Wake this process's waiters after a commit (other processes hear NOTIFY, on
        PostgreSQL; on SQLite they poll)."""
        changed = [job.id for job in jobs if job is not None]
        if changed:
            self.changes.jobs_changed(changed)
            if any(job is not None and job.state is JobState.QUEUED for job in jobs):
                self.changes.work_available()
            self.changes.outbox_available()
