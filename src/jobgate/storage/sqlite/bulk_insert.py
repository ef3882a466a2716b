"""BulkInsertStore on SQLite: the whole call in one write operation (one transaction, one fsync)
of several statements, hence SQLite's own; the single writer makes the bounds exact without
PostgreSQL's admission locks."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from jobgate import errors
from jobgate.storage import sql
from jobgate.storage.records import BulkItem, BulkResult, QueueLimit, SubmitOutcome
from jobgate.storage.sqlite.batch import insert_params
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.store.bulk_insert import BulkInsertQueries, new_jobs

Q = sql.load("jobgate.storage.sqlite")


class SqliteBulkInsert(BulkInsertQueries):
    _db: SqliteDatabase

    async def _insert_bulk(
        self, items: Sequence[BulkItem], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[BulkResult]:
        at = self._sql.codec.now(now)

        def insert(conn: sqlite3.Connection) -> list[BulkResult]:
            results: list[BulkResult] = []
            inserted = 0
            for item in items:
                claim = item.idempotency
                if claim is not None:
                    key = {
                        "tenant_id": item.job.tenant_id,
                        "route": claim.route,
                        "key": claim.key,
                        "now": at,
                    }
                    seen = conn.execute(Q["idempotency_find"].sql, key).fetchone()
                    if seen is not None:
                        if seen["body_hash"] != claim.body_hash:
                            results.append(errors.IdempotencyKeyReused())
                            continue
                        row = conn.execute(Q["job_get"].sql, {"id": seen["job_id"]}).fetchone()
                        results.append(
                            SubmitOutcome(self._decode.job(row), True, seen["status_code"])
                        )
                        continue
                    conn.execute(
                        Q["idempotency_bind"].sql,
                        {
                            **key,
                            "body_hash": claim.body_hash,
                            "job_id": item.job.id,
                            "status_code": claim.status_code,
                            "expires_at": at + claim.ttl_s,
                        },
                    )
                params = insert_params(item.job, at)
                row = conn.execute(Q["job_insert"].sql, params).fetchone()
                results.append(SubmitOutcome(self._decode.job(row), False, 202))
                inserted += 1
            if queue_limit is not None and inserted:
                # Counted after the inserts: raising rolls the whole call back.
                for tenant_id in {job.tenant_id for job in new_jobs(results)}:
                    count = conn.execute(
                        Q["queued_count_many"].sql, {"tenant_id": tenant_id}
                    ).fetchone()
                    if queue_limit.tenant_max is not None and (
                        count["tenant_queued"] > queue_limit.tenant_max
                    ):
                        raise errors.QueueFull("max_queued", 0)
                    if queue_limit.total_max is not None and (
                        count["total_queued"] > queue_limit.total_max
                    ):
                        raise errors.QueueFull("max_queued_total", 0)
            return results

        return await self._db.write(insert)
