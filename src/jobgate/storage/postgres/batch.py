"""BatchStore on PostgreSQL: one INSERT ... SELECT from a JSON array for the whole batch."""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from jobgate.domain.job import Job, NewJob
from jobgate.storage.records import QueueLimit
from jobgate.storage.rows import RowDecoder
from jobgate.wakeups import ChangeHub

T = TypeVar("T")


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


class PostgresBatch:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    changes: ChangeHub
    _decode: RowDecoder

    async def _with_conn(
        self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        raise NotImplementedError

    @staticmethod
    async def _run(conn: Any, query_name: str, /, **params: Any) -> list[Any]:
        raise NotImplementedError

    async def _admit_locked(self, conn: Any, limit: QueueLimit, adding: Mapping[str, int]) -> None:
        raise NotImplementedError

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

        async def insert(conn: Any) -> list[Any]:
            if queue_limit is not None:
                await self._admit_locked(conn, queue_limit, adding)
            return await self._run(
                conn, "job_insert_many", jobs=[insert_payload(j) for j in jobs], now=now
            )

        rows = await self._with_conn(insert, transaction=queue_limit is not None)
        by_id = {row["id"]: self._decode.job(row) for row in rows}
        self.changes.work_available()
        return [by_id[job.id] for job in jobs]
