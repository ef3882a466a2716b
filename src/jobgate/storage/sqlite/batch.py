"""BatchStore on SQLite: every insert of the batch in one write operation, so one transaction
and one fsync (the writer thread's group commit does the rest). The queue bounds are counted
and the rows inserted by several statements inside that operation, hence SQLite's own."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from jobgate import errors
from jobgate.domain.job import Job, NewJob
from jobgate.storage import sql
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import QueueLimit
from jobgate.storage.rows import MAX_INTERVAL_S, RowDecoder
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


def _json_in(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def insert_params(job: NewJob, at: float) -> dict[str, Any]:
    """The job_insert parameters of one new job stored at `at` (unix seconds)."""
    wanted = at + job.delay_s if job.run_at is None else job.run_at.timestamp()
    run_at = max(at, wanted)  # a time in the past means now
    return {
        "id": job.id,
        "tenant_id": job.tenant_id,
        "api": job.api,
        "provider": job.provider,
        "endpoint": job.endpoint,
        "model": job.model,
        "request": _json_in(job.request),
        "metadata": _json_in(job.metadata),
        "webhook": _json_in(job.webhook),
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "now": at,
        "run_at": run_at,
        "expires_at": None
        if job.start_timeout_s is None
        else run_at + min(job.start_timeout_s, MAX_INTERVAL_S),
        "execution_timeout_s": job.execution_timeout_s,
        "concurrency_key": job.concurrency_key,
        "model_route": job.model_route,
    }


class SqliteBatch(SqlPart):
    _db: SqliteDatabase
    _decode: RowDecoder

    async def job_insert_many(
        self,
        *,
        jobs: Sequence[NewJob],
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> list[Job]:
        if not jobs:
            return []
        at = self._sql.codec.now(now)
        batch = [insert_params(job, at) for job in jobs]
        tenants = {job.tenant_id for job in jobs}

        def insert(conn: sqlite3.Connection) -> list[Job]:
            if queue_limit is not None:
                for tenant_id in tenants:
                    row = conn.execute(
                        Q["queued_count_many"].sql, {"tenant_id": tenant_id}
                    ).fetchone()
                    adding = sum(1 for job in jobs if job.tenant_id == tenant_id)
                    if (
                        queue_limit.tenant_max is not None
                        and row["tenant_queued"] + adding > queue_limit.tenant_max
                    ):
                        raise errors.QueueFull("max_queued", 0)
                    if (
                        queue_limit.total_max is not None
                        and row["total_queued"] + len(jobs) > queue_limit.total_max
                    ):
                        raise errors.QueueFull("max_queued_total", 0)
            query = Q["job_insert"].sql
            return [self._decode.job(conn.execute(query, params).fetchone()) for params in batch]

        inserted = await self._db.write(insert)
        self.changes.work_available()
        return inserted
