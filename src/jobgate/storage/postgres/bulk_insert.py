"""BulkInsertStore on PostgreSQL: one transaction; keyless items in one INSERT ... SELECT, keyed
items one statement each (the key's binding and the job in one statement, as for a submit),
counted under the admission locks. Several statements in one transaction, hence PostgreSQL's
own (SQLite runs the whole call inside one write operation of its single writer)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from datetime import datetime

import asyncpg

from jobgate import errors
from jobgate.storage.postgres.batch import insert_params, insert_payload
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.postgres.limits import check_bounds, lock_bounds
from jobgate.storage.records import (
    BulkItem,
    BulkResult,
    IdempotencyClaim,
    QueueLimit,
    SubmitOutcome,
)
from jobgate.storage.store.bulk_insert import BulkInsertQueries, new_jobs


@contextlib.contextmanager
def key_in_use() -> Iterator[None]:
    """An Idempotency-Key whose binding another transaction holds past lock_timeout is in use
    (errors.IdempotencyInProgress), not the database unavailable."""
    try:
        yield
    except errors.StorageUnavailable as exc:
        if isinstance(exc.__cause__, asyncpg.exceptions.LockNotAvailableError):
            raise errors.IdempotencyInProgress() from exc
        raise


class PostgresBulkInsert(BulkInsertQueries):
    _sql: PostgresExecutor

    async def _insert_bulk(
        self, items: Sequence[BulkItem], queue_limit: QueueLimit | None, now: datetime | None
    ) -> list[BulkResult]:
        async def insert(conn: Conn) -> list[BulkResult]:
            if queue_limit is not None:  # the admission locks first, as a single submit takes them
                await lock_bounds(self._sql, conn, queue_limit, {i.job.tenant_id for i in items})
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
            if queue_limit is not None:  # counted after the inserts: raising rolls all back
                new = {job.tenant_id: 0 for job in new_jobs(done)}
                if new:
                    await check_bounds(self._sql, conn, queue_limit, new)
            return done

        with key_in_use():
            return await self._sql.run(insert, transaction=True)

    async def _insert_keyed(self, conn: Conn, item: BulkItem, now: datetime | None) -> BulkResult:
        claim = item.idempotency
        assert claim is not None
        params = {**insert_params(item.job, self._sql.codec), **dataclasses.asdict(claim)}
        rows = await self._sql.fetch(conn, "job_insert_idempotent", **params, now=now)
        if rows:
            return SubmitOutcome(self._decode.job(rows[0]), False, 202)
        # A live binding (made earlier, or by an earlier item of this call) answers.
        earlier = await self._replay(conn, item.job.tenant_id, claim, now)
        if earlier is None:  # the lock wait ended with the binding gone: not expected in one call
            raise errors.IdempotencyInProgress()
        return earlier

    async def _replay(
        self, conn: Conn, tenant_id: str, claim: IdempotencyClaim, now: datetime | None
    ) -> BulkResult | None:
        """What an earlier submit with this key answered (its job, or the refusal of a key
        reused with another body); None when the key is not bound."""
        key = {"tenant_id": tenant_id, "route": claim.route, "key": claim.key, "now": now}
        seen = await self._sql.fetch(conn, "idempotency_find", **key)
        if not seen:
            return None
        if seen[0]["body_hash"] != claim.body_hash:
            return errors.IdempotencyKeyReused()
        existing = await self._sql.fetch(conn, "job_get", id=seen[0]["job_id"])
        if not existing:
            raise errors.StorageError(f"idempotency key bound to missing job {seen[0]['job_id']}")
        return SubmitOutcome(self._decode.job(existing[0]), True, seen[0]["status_code"])
