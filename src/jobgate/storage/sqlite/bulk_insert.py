"""BulkInsertStore on SQLite: the whole call in one write operation (one transaction, one fsync)
of several statements, hence SQLite's own; the single writer makes the bounds exact without
PostgreSQL's admission locks."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from jobgate import errors
from jobgate.storage.records import BulkItem, BulkResult, QueueLimit
from jobgate.storage.rows import RowDecoder
from jobgate.storage.sqlite.batch import insert_job, replay_or_bind
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q
from jobgate.storage.store.bulk_insert import BulkInsertQueries, new_jobs


class SqliteBulkInsert(BulkInsertQueries):
    _db: SqliteDatabase

    async def _insert_bulk(
        self, items: Sequence[BulkItem], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[BulkResult]:
        at = self._sql.codec.now(now)
        return await self._db.write(
            lambda conn: insert_items(conn, items, queue_limit, at, self._decode)
        )


def insert_items(
    conn: sqlite3.Connection,
    items: Sequence[BulkItem],
    queue_limit: QueueLimit | None,
    at: float,
    decode: RowDecoder,
) -> list[BulkResult]:
    """Insert `items` at `at` inside the caller's write (its keys replayed or bound), then
    count the bounds: raising errors.QueueFull rolls the whole write back."""
    results: list[BulkResult] = []
    inserted = 0
    for item in items:
        claim = item.idempotency
        if claim is not None and (earlier := replay_or_bind(conn, item.job, claim, at, decode)):
            results.append(earlier)
            continue
        results.append(insert_job(conn, item.job, at))
        inserted += 1
    if queue_limit is not None and inserted:
        # Counted after the inserts: raising rolls the whole call back.
        for tenant_id in {job.tenant_id for job in new_jobs(results)}:
            count = conn.execute(Q["queued_count_many"].sql, {"tenant_id": tenant_id}).fetchone()
            if queue_limit.tenant_max is not None and (
                count["tenant_queued"] > queue_limit.tenant_max
            ):
                raise errors.QueueFull("max_queued", 0)
            if queue_limit.total_max is not None and (
                count["total_queued"] > queue_limit.total_max
            ):
                raise errors.QueueFull("max_queued_total", 0)
    return results
