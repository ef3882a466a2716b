"""BatchStore on PostgreSQL: one INSERT ... SELECT from a JSON array for the whole batch,
behind the admission locks when a queue limit applies (two statements in one transaction, so
PostgreSQL's own; SQLite inserts row by row inside its single writer)."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate.domain.job import Job, NewJob
from jobgate.storage.executor import Codec, Row
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.postgres.limits import admit
from jobgate.storage.records import QueueLimit
from jobgate.storage.store.batch import BatchQueries, new_job_fields
from jobgate.storage.store.bulk_insert import stored_job


def insert_params(job: NewJob, codec: Codec) -> dict[str, Any]:
    """A new job as job_insert and job_insert_idempotent take it (the SQL computes its times)."""
    return {
        **new_job_fields(job, codec.json),
        "start_timeout_s": job.start_timeout_s,
        "run_at": job.run_at,
        "delay_s": job.delay_s,
    }


def insert_payload(job: NewJob, codec: Codec) -> dict[str, Any]:
    """A new job as job_insert_many's JSON array takes it (a time as ISO text)."""
    run_at = None if job.run_at is None else job.run_at.isoformat()
    return {**insert_params(job, codec), "run_at": run_at}


class PostgresBatch(BatchQueries):
    _sql: PostgresExecutor

    async def _insert_many(
        self, jobs: Sequence[NewJob], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[Job]:
        adding = collections.Counter(job.tenant_id for job in jobs)

        async def insert(conn: Conn) -> list[Row]:
            if queue_limit is not None:
                await admit(self._sql, conn, queue_limit, adding)
            payload = [insert_payload(j, self._sql.codec) for j in jobs]
            return await self._sql.fetch(conn, "job_insert_many", jobs=payload, now=now)

        rows = await self._sql.run(insert, transaction=queue_limit is not None)
        by_id = {row["id"]: row for row in rows}
        return [stored_job(job, by_id[job.id]) for job in jobs]
