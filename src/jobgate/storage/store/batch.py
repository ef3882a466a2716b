"""BatchStore (batched enqueue), written once over the executor: what every dialect's insert
of many jobs shares. The insert is a transaction of several statements (the queue bounds, then
the rows), so each dialect supplies `_insert_many`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from jobgate.domain.job import Job, NewJob
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import QueueLimit


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


class BatchQueries(SqlPart):
    async def job_insert_many(
        self,
        *,
        jobs: Sequence[NewJob],
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> list[Job]:
        if not jobs:
            return []
        stored = await self._insert_many(jobs, queue_limit, now)
        self.changes.work_available()
        return stored

    async def _insert_many(
        self, jobs: Sequence[NewJob], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[Job]:
        """Insert `jobs` (not empty) and their first events in one transaction, within
        `queue_limit`; answers them in the order given."""
        raise NotImplementedError

    async def job_insert_streamed(
        self, *, chunks: Iterable[Sequence[NewJob]], now: datetime | None = None
    ) -> list[Job]:
        stored = await self._insert_streamed(chunks, now)
        if stored:
            self.changes.work_available()
        return stored

    async def _insert_streamed(
        self, chunks: Iterable[Sequence[NewJob]], now: datetime | None
    ) -> list[Job]:
        """job_insert_streamed's work. Here: every chunk made first, then one insert (a
        dialect whose database works beside this process overlaps them)."""
        jobs = [job for chunk in chunks for job in chunk]
        return await self._insert_many(jobs, None, now) if jobs else []
