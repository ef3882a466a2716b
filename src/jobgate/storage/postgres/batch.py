"""BatchStore on PostgreSQL: one INSERT ... SELECT from a JSON array for the whole batch,
behind the admission locks when a queue limit applies (two statements in one transaction, so
PostgreSQL's own; SQLite inserts row by row inside its single writer)."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobgate.domain.job import Job, NewJob
from jobgate.storage.executor import Row, SqlPart
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.records import QueueLimit
from jobgate.storage.rows import RowDecoder


def insert_payload(job: NewJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "tenant_id": job.tenant_id,
        "api": job.api,
        "provider": job.provider,
        "endpoint": job.endpoint,
        "model": job.model,
        "request": job.request,
        "metadata": job.metadata,
        "webhook": job.webhook,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "start_timeout_s": job.start_timeout_s,
        "execution_timeout_s": job.execution_timeout_s,
        "run_at": None if job.run_at is None else job.run_at.isoformat(),
        "delay_s": job.delay_s,
        "concurrency_key": job.concurrency_key,
        "model_route": job.model_route,
    }


class PostgresBatch(SqlPart):
    _sql: PostgresExecutor
    _decode: RowDecoder

    if TYPE_CHECKING:  # supplied by the host store (postgres.limits)

        async def _admit_locked(
            self, conn: Any, limit: QueueLimit, adding: Mapping[str, int]
        ) -> None: ...

    async def job_insert_many(
        self,
        *,
        jobs: Sequence[NewJob],
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> list[Job]:
        if not jobs:
            return []
        adding = collections.Counter(job.tenant_id for job in jobs)

        async def insert(conn: Conn) -> list[Row]:
            if queue_limit is not None:
                await self._admit_locked(conn, queue_limit, adding)
            payload = [insert_payload(j) for j in jobs]
            return await self._sql.fetch(conn, "job_insert_many", jobs=payload, now=now)

        rows = await self._sql.run(insert, transaction=queue_limit is not None)
        by_id = {row["id"]: self._decode.job(row) for row in rows}
        self.changes.work_available()
        return [by_id[job.id] for job in jobs]
