"""BulkInsertStore on PostgreSQL: one transaction; keyless items in one INSERT ... SELECT, keyed
items in another that binds their keys and inserts the jobs of the keys it bound (one statement
for the whole call, as job_insert_idempotent is for one submit), counted under the admission
locks. Several statements in one transaction, hence PostgreSQL's own (SQLite runs the whole call
inside one write operation of its single writer)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from jobgate import errors
from jobgate.storage.executor import Row
from jobgate.storage.postgres.batch import insert_keyless, insert_payload
from jobgate.storage.postgres.executor import Conn, PostgresExecutor, Q
from jobgate.storage.postgres.limits import check_bounds, lock_bounds
from jobgate.storage.records import (
    BulkItem,
    BulkResult,
    IdempotencyClaim,
    QueueLimit,
    SubmitOutcome,
)
from jobgate.storage.store.bulk_insert import BulkInsertQueries, new_jobs, stored_job


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


async def fetch_each(conn: Conn, query: str, params: Sequence[dict[str, Any]]) -> list[Row]:
    """One named query per parameter set, pipelined (asyncpg's `fetchmany`): one round trip
    for all of them, executed in order, their rows concatenated."""
    q = Q[query]
    return list(await conn.fetchmany(q.positional_sql, [q.args(p) for p in params]))


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
            keyed = [i for i, item in enumerate(items) if item.idempotency is not None]
            counted = False
            if keyless:
                # Without keyed items to follow, the keyless insert is the last: it counts.
                jobs, counted = await insert_keyless(
                    self._sql,
                    conn,
                    [items[i].job for i in keyless],
                    None if keyed else queue_limit,
                    now,
                )
                for i, job in zip(keyless, jobs, strict=True):
                    results[i] = SubmitOutcome(job, False, 202)
            if keyed:
                await self._insert_keyed(conn, items, keyed, results, now)
            done = [r for r in results if r is not None]
            if queue_limit is not None and not counted:  # after the inserts: raising rolls back
                new = {job.tenant_id: 0 for job in new_jobs(done)}
                if new:
                    await check_bounds(self._sql, conn, queue_limit, new)
            return done

        with key_in_use():
            return await self._sql.run(insert, transaction=True)

    async def _insert_keyed(
        self,
        conn: Conn,
        items: Sequence[BulkItem],
        keyed: Sequence[int],
        results: list[BulkResult | None],
        now: datetime | None,
    ) -> None:
        """The keyed items (their indexes in `items`, in order) into `results`: one statement
        binds the keys in the items' order and inserts the jobs of the keys it bound. A key
        repeated in the call binds to its first item only (ON CONFLICT touches a row once per
        statement): its later items, and every item whose key was already bound, answer what
        the binding holds (_replay_many), as if each item had run alone in order."""
        codec = self._sql.codec
        first: dict[tuple[str, str, str], dict[str, Any]] = {}
        for i in keyed:
            job, claim = items[i].job, items[i].idempotency
            assert claim is not None
            if (job.tenant_id, claim.route, claim.key) not in first:
                # The claim's fields by name: dataclasses.asdict deep-copies (a tenth of the
                # keyed path once).
                binding = {name: getattr(claim, name) for name in IdempotencyClaim.__slots__}
                payload = {**insert_payload(job, codec), **binding}
                first[(job.tenant_id, claim.route, claim.key)] = payload
        rows = await self._sql.fetch(
            conn, "job_insert_idempotent_many", jobs=list(first.values()), now=now
        )
        inserted = {row["id"]: row for row in rows}
        bound = []
        for i in keyed:
            row = inserted.get(items[i].job.id)
            if row is None:
                bound.append(i)
            else:
                results[i] = SubmitOutcome(stored_job(items[i].job, row), False, 202)
        if bound:
            await self._replay_many(conn, items, bound, results, now)

    async def _replay_many(
        self,
        conn: Conn,
        items: Sequence[BulkItem],
        bound: Sequence[int],
        results: list[BulkResult | None],
        now: datetime | None,
    ) -> None:
        """What earlier submits with these items' keys answered: the bound job (replayed), or
        the refusal of a key reused with another body. Two pipelined round trips for all of
        them: the bindings, then their jobs."""
        finds = []
        for i in bound:
            claim = items[i].idempotency
            assert claim is not None
            tenant_id = items[i].job.tenant_id
            finds.append({"tenant_id": tenant_id, "route": claim.route, "key": claim.key})
        seen = await fetch_each(conn, "idempotency_find", [{**f, "now": now} for f in finds])
        # At most one live binding per key, so one row per item unless a binding went away.
        if len(seen) != len(bound):  # the lock wait ended with a binding gone: not expected
            raise errors.IdempotencyInProgress()
        same: list[tuple[int, Row]] = []
        for i, binding in zip(bound, seen, strict=True):
            claim = items[i].idempotency
            assert claim is not None
            if binding["body_hash"] == claim.body_hash:
                same.append((i, binding))
            else:
                results[i] = errors.IdempotencyKeyReused()
        if not same:
            return
        ids = [{"id": binding["job_id"]} for _, binding in same]
        jobs = {row["id"]: row for row in await fetch_each(conn, "job_get", ids)}
        for i, binding in same:
            row = jobs.get(binding["job_id"])
            if row is None:
                raise errors.StorageError(
                    f"idempotency key bound to missing job {binding['job_id']}"
                )
            results[i] = SubmitOutcome(self._decode.job(row), True, binding["status_code"])

    async def _replay(
        self, conn: Conn, tenant_id: str, claim: IdempotencyClaim, now: datetime | None
    ) -> BulkResult | None:
        """What an earlier submit with this key answered (its job, or the refusal of a key
        reused with another body); None when the key is not bound. The single submit's replay
        (storage.postgres.store)."""
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
