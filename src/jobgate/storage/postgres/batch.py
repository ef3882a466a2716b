"""BatchStore on PostgreSQL: a batch is a bulk insert without keys (postgres.bulk_insert: one
INSERT ... SELECT from a JSON array, behind the admission locks when a queue limit applies);
and how a new job travels to the insert statements."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate.domain.job import Job, NewJob
from jobgate.storage.executor import Codec
from jobgate.storage.records import BulkItem, QueueLimit, SubmitOutcome
from jobgate.storage.store.batch import BatchQueries, new_job_fields
from jobgate.storage.store.bulk_insert import BulkInsertQueries


def insert_params(job: NewJob, codec: Codec) -> dict[str, Any]:
    """A new job as job_insert and job_insert_idempotent take it (the SQL computes its times)."""
    return {
        **new_job_fields(job, codec.json),
        "start_timeout_s": job.start_timeout_s,
        "run_at": job.run_at,
        "delay_s": job.delay_s,
    }


def insert_payload(job: NewJob, codec: Codec) -> dict[str, Any]:
    """A new job as the JSON arrays of job_insert_many and job_insert_idempotent_many take it
    (a time as ISO text)."""
    run_at = None if job.run_at is None else job.run_at.isoformat()
    return {**insert_params(job, codec), "run_at": run_at}


class PostgresBatch(BatchQueries, BulkInsertQueries):  # _insert_bulk: postgres.bulk_insert's
    async def _insert_many(
        self, jobs: Sequence[NewJob], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[Job]:
        """A bulk insert without keys: one job_insert_many, behind the admission locks."""
        results = await self._insert_bulk([BulkItem(job) for job in jobs], queue_limit, now)
        return [result.job for result in results if isinstance(result, SubmitOutcome)]
