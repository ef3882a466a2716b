"""BulkInsertStore on PostgreSQL: one transaction; keyless items in one INSERT ... SELECT, keyed
items one statement each (the key's binding and the job in one statement, as for a submit),
counted under the admission locks. Several statements in one transaction, hence PostgreSQL's
own (SQLite runs the whole call inside one write operation of its single writer)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from jobgate import errors
from jobgate.storage.postgres.batch import insert_params, insert_payload
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.records import BulkItem, BulkResult, QueueLimit, SubmitOutcome
from jobgate.storage.store.bulk_insert import BulkInsertQueries, new_jobs


class PostgresBulkInsert(BulkInsertQueries):
    _sql: PostgresExecutor

    async def _insert_bulk(
        self, items: Sequence[BulkItem], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[BulkResult]:
        async def insert(conn: Conn) -> list[BulkResult]:
            if queue_limit is not None:  # the admission locks first, as a single submit takes them
                await _lock_bounds(self, conn, queue_limit, {item.job.tenant_id for item in items})
            results: list[BulkResult | None] = [None] * len(items)
            keyless = [i for i, item in enumerate(items) if item.idempotency is None]
            if keyless:
                rows = await self._sql.fetch(
                    conn,
                    "job_insert_many",
                    jobs=[insert_payload(items[i].job, self._sql.codec) for i in keyless],
                    now=now,
                )
                by_id = {row["id"]: row for row in rows}
                for i in keyless:
                    job = self._decode.job(by_id[items[i].job.id])
                    results[i] = SubmitOutcome(job, False, 202)
            for i, item in enumerate(items):
                if item.idempotency is not None:
                    results[i] = await self._insert_keyed(conn, item, now)
            done = [r for r in results if r is not None]
            if queue_limit is not None:
                await _check_bounds(self, conn, queue_limit, done)
            return done

        try:
            return await self._sql.run(insert, transaction=True)
        except errors.StorageUnavailable as exc:
            if isinstance(exc.__cause__, asyncpg.exceptions.LockNotAvailableError):
                raise errors.IdempotencyInProgress() from exc
            raise

    async def _insert_keyed(self, conn: Conn, item: BulkItem, now: datetime | None) -> BulkResult:
        claim = item.idempotency
        assert claim is not None
        job = item.job
        rows = await self._sql.fetch(
            conn,
            "job_insert_idempotent",
            **insert_params(job, self._sql.codec),
            now=now,
            route=claim.route,
            key=claim.key,
            body_hash=claim.body_hash,
            status_code=claim.status_code,
            ttl_s=claim.ttl_s,
        )
        if rows:
            return SubmitOutcome(self._decode.job(rows[0]), False, 202)
        # A live binding (made earlier, or by an earlier item of this call) answers.
        seen = await self._sql.fetch(
            conn,
            "idempotency_find",
            tenant_id=job.tenant_id,
            route=claim.route,
            key=claim.key,
            now=now,
        )
        if not seen:  # the lock wait ended with the binding gone: not expected in one call
            raise errors.IdempotencyInProgress()
        if seen[0]["body_hash"] != claim.body_hash:
            return errors.IdempotencyKeyReused()
        existing = await self._sql.fetch(conn, "job_get", id=seen[0]["job_id"])
        if not existing:
            raise errors.StorageError(f"idempotency key bound to missing job {seen[0]['job_id']}")
        return SubmitOutcome(self._decode.job(existing[0]), True, seen[0]["status_code"])


async def _lock_bounds(
    store: PostgresBulkInsert, conn: Conn, limit: QueueLimit, tenant_ids: set[str]
) -> None:
    """The admission locks of limits.py's `_admit_locked`, in the same order (tenants sorted,
    then the global one), held until commit: the count after the inserts is then exact."""
    if limit.tenant_max is not None:
        for tenant_id in sorted(tenant_ids):
            await store._sql.fetch(conn, "queue_lock_tenant", tenant_id=tenant_id)
    if limit.total_max is not None:
        await store._sql.fetch(conn, "queue_lock_total")


async def _check_bounds(
    store: PostgresBulkInsert, conn: Conn, limit: QueueLimit, results: Sequence[BulkResult]
) -> None:
    """Counted after the inserts, under the admission locks: raising rolls everything back."""
    new = new_jobs(results)
    if not new:
        return
    if limit.tenant_max is not None:
        for tenant_id in {job.tenant_id for job in new}:
            (row,) = await store._sql.fetch(conn, "queued_count", tenant_id=tenant_id)
            if row["queued"] > limit.tenant_max:
                raise errors.QueueFull("max_queued", 0)
    if limit.total_max is not None:
        (row,) = await store._sql.fetch(conn, "queued_total")
        if row["queued"] > limit.total_max:
            raise errors.QueueFull("max_queued_total", 0)
