"""BulkInsertStore (native bulk submit), written once over the executor: what every dialect's
keyed bulk insert shares. The insert is a transaction of several statements (keys, rows, the
queue bounds), so each dialect supplies `_insert_bulk`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate.domain.job import Job, NewJob
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import BulkItem, BulkResult, QueueLimit, SubmitOutcome
from jobgate.storage.rows import EARLIEST, LATEST, RowLike

_READ_ORDER = ("run_at", "created_at", "updated_at", "expires_at")  # as RowDecoder.job reads them
_CLAMPED = frozenset((LATEST, EARLIEST))


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


def new_jobs(results: Sequence[BulkResult]) -> list[Job]:
    """The jobs a bulk insert stored (not replayed, not refused)."""
    return [r.job for r in results if isinstance(r, SubmitOutcome) and not r.replayed]


class BulkInsertQueries(SqlPart):
    async def job_insert_bulk(
        self,
        *,
        items: Sequence[BulkItem],
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> list[BulkResult]:
        if not items:
            return []
        results = await self._insert_bulk(items, queue_limit, now)
        if new_jobs(results):
            self.changes.work_available()
        return results

    async def _insert_bulk(
        self, items: Sequence[BulkItem], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[BulkResult]:
        """Insert `items` (not empty) in one transaction; one result per item, in order."""
        raise NotImplementedError
