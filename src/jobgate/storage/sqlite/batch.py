"""BatchStore on SQLite: a keyless bulk insert, so every insert of the batch in one write
operation, one transaction and one fsync (the writer thread's group commit does the rest);
and how a new job's row and its Idempotency-Key are written, for a submit and a bulk insert."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate import errors
from jobgate.domain.job import Job, NewJob
from jobgate.storage.records import (
    BulkItem,
    BulkResult,
    IdempotencyClaim,
    QueueLimit,
    SubmitOutcome,
)
from jobgate.storage.rows import MAX_INTERVAL_S, RowDecoder, unix_time
from jobgate.storage.sqlite.executor import Q, json_text
from jobgate.storage.store.batch import BatchQueries, new_job_fields
from jobgate.storage.store.bulk_insert import BulkInsertQueries, stored_job


def insert_params(job: NewJob, at: float) -> dict[str, Any]:
    """The job_insert parameters of one new job stored at `at` (unix seconds)."""
    wanted = at + job.delay_s if job.run_at is None else job.run_at.timestamp()
    run_at = max(at, wanted)  # a time in the past means now
    return {
        **new_job_fields(job, json_text),
        "now": at,
        "run_at": run_at,
        "expires_at": None
        if job.start_timeout_s is None
        else run_at + min(job.start_timeout_s, MAX_INTERVAL_S),
    }


def insert_job(conn: sqlite3.Connection, job: NewJob, at: float) -> SubmitOutcome:
    """Insert `job` at `at`; the row is not read back, its times being computed here."""
    params = insert_params(job, at)
    conn.execute(Q["job_insert"].sql, params)
    times = {"created_at": at, "run_at": params["run_at"], "expires_at": params["expires_at"]}
    return SubmitOutcome(stored_job(job, {k: unix_time(t) for k, t in times.items()}), False, 202)


def replay_or_bind(
    conn: sqlite3.Connection, job: NewJob, claim: IdempotencyClaim, at: float, decode: RowDecoder
) -> BulkResult | None:
    """What an earlier submit with this key answered (its job replayed, or the refusal of a
    key reused with another body); None once the key is bound to `job`, to be inserted next."""
    key = {"tenant_id": job.tenant_id, "route": claim.route, "key": claim.key, "now": at}
    seen = conn.execute(Q["idempotency_find"].sql, key).fetchone()
    if seen is None:
        binding = {"body_hash": claim.body_hash, "job_id": job.id, "status_code": claim.status_code}
        conn.execute(Q["idempotency_bind"].sql, {**key, **binding, "expires_at": at + claim.ttl_s})
        return None
    if seen["body_hash"] != claim.body_hash:
        return errors.IdempotencyKeyReused()
    row = conn.execute(Q["job_get"].sql, {"id": seen["job_id"]}).fetchone()
    return SubmitOutcome(decode.job(row), True, seen["status_code"])


class SqliteBatch(BatchQueries, BulkInsertQueries):  # _insert_bulk: sqlite.bulk_insert's
    async def _insert_many(
        self, jobs: Sequence[NewJob], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[Job]:
        """A bulk insert without keys: every job_insert, then the bounds counted, in one write
        operation of the single writer (raising rolls all of it back)."""
        results = await self._insert_bulk([BulkItem(job) for job in jobs], queue_limit, now)
        return [result.job for result in results if isinstance(result, SubmitOutcome)]
