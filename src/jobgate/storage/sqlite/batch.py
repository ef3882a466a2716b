"""BatchStore on SQLite: a keyless bulk insert, so every insert of the batch in one write
operation, one transaction and one fsync (the writer thread's group commit does the rest);
and how a new job's row is written (`insert_params`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from jobgate.domain.job import Job, NewJob
from jobgate.storage.records import BulkItem, BulkResult, QueueLimit, SubmitOutcome
from jobgate.storage.rows import MAX_INTERVAL_S
from jobgate.storage.store.batch import BatchQueries, new_job_fields


def _json_in(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def insert_params(job: NewJob, at: float) -> dict[str, Any]:
    """The job_insert parameters of one new job stored at `at` (unix seconds)."""
    wanted = at + job.delay_s if job.run_at is None else job.run_at.timestamp()
    run_at = max(at, wanted)  # a time in the past means now
    return {
        **new_job_fields(job, _json_in),
        "now": at,
        "run_at": run_at,
        "expires_at": None
        if job.start_timeout_s is None
        else run_at + min(job.start_timeout_s, MAX_INTERVAL_S),
    }


class SqliteBatch(BatchQueries):
    async def _insert_many(
        self, jobs: Sequence[NewJob], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[Job]:
        """A bulk insert without keys: every job_insert, then the bounds counted, in one write
        operation of the single writer (raising rolls all of it back)."""
        results = await self._insert_bulk([BulkItem(job) for job in jobs], queue_limit, now)
        return [result.job for result in results if isinstance(result, SubmitOutcome)]

    if TYPE_CHECKING:  # supplied by the host store (sqlite.bulk_insert)

        async def _insert_bulk(
            self, items: Sequence[BulkItem], queue_limit: QueueLimit | None, now: datetime | None
        ) -> list[BulkResult]: ...
