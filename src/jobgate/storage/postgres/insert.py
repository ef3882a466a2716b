"""The insert on PostgreSQL (Storage.job_insert). One job without bounds is one statement
(job_insert, or job_insert_idempotent: ON CONFLICT binds its key); keyless jobs are one
INSERT ... SELECT per chunk (postgres.insert_many), chunks pipelined while the next is made; keyed
jobs one statement that binds the call's keys and inserts the jobs of the keys it bound, then
the bindings it met are read and domain.idempotency.decide answers each item. With a queue
limit, all of it under the admission locks (postgres.limits) in one transaction."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from jobgate import errors
from jobgate.domain.idempotency import Decision, Scope, decide
from jobgate.domain.job import Job, NewJob
from jobgate.storage.executor import Row
from jobgate.storage.postgres.executor import Conn, PostgresExecutor, Q
from jobgate.storage.postgres.insert_many import (
    answers,
    insert_keyless,
    insert_many_on,
    insert_params,
    insert_payload,
    insert_payloads,
)
from jobgate.storage.postgres.limits import admit, check_bounds, lock_bounds
from jobgate.storage.records import (
    BulkResult,
    IdempotencyClaim,
    Inserted,
    QueueLimit,
    SubmitOutcome,
)
from jobgate.storage.rows import RowDecoder
from jobgate.storage.store.insert import key_uses, scope, stored_job

# How often a single keyed submit looks again when the binding it met expired before it
# could read it.
_BINDING_LOOKS = 3


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


async def insert(
    sql: PostgresExecutor,
    decode: RowDecoder,
    chunks: Iterable[Sequence[NewJob]],
    keys: Sequence[IdempotencyClaim | None] | None,
    queue_limit: QueueLimit | None,
    now: datetime | None,
) -> Inserted:
    """Storage.job_insert's transaction."""
    if keys is None and queue_limit is None and not isinstance(chunks, Sequence):
        return Inserted(await insert_streamed(sql, chunks, now))
    jobs = [job for chunk in chunks for job in chunk]
    if keys is not None and len(keys) != len(jobs):
        raise ValueError("job_insert: one key (or None) per job")
    if keys is not None and all(claim is None for claim in keys):
        keys = None
    if not jobs:
        return Inserted([])
    if len(jobs) == 1:
        return await insert_one(
            sql, decode, jobs[0], None if keys is None else keys[0], queue_limit, now
        )
    if keys is None:
        return Inserted(
            await sql.run(
                lambda conn: insert_many_on(sql, conn, jobs, queue_limit, now), transaction=True
            )
        )
    claims = keys

    async def insert_all(conn: Conn) -> list[BulkResult]:
        return await insert_keyed(sql, decode, conn, jobs, claims, queue_limit, now)

    with key_in_use():
        return Inserted.of(await sql.run(insert_all, transaction=True))


async def insert_one(
    sql: PostgresExecutor,
    decode: RowDecoder,
    job: NewJob,
    claim: IdempotencyClaim | None,
    queue_limit: QueueLimit | None,
    now: datetime | None,
) -> Inserted:
    """One job in one statement (with a queue limit, after the admission locks and the count in
    the same transaction). A keyed job's statement binds its key or meets a binding, then read
    (a binding may expire in between: look again)."""
    params = {**insert_params(job, sql.codec), "now": now}
    if queue_limit is not None and claim is not None:
        # Near a bound: a replay still answers (a repeat is never refused as full).
        earlier = await sql.run(lambda conn: replay_one(sql, decode, conn, job, claim, now))
        if earlier is not None:
            return Inserted.of([earlier])
    if claim is None:
        row = await _insert_row(sql, "job_insert", params, job.tenant_id, queue_limit)
        assert row is not None
        return Inserted([stored_job(job, row)])
    params.update(dataclasses.asdict(claim))
    for _ in range(_BINDING_LOOKS):
        with key_in_use():
            row = await _insert_row(
                sql, "job_insert_idempotent", params, job.tenant_id, queue_limit
            )
        if row is not None:
            return Inserted([stored_job(job, row)])
        earlier = await sql.run(lambda conn: replay_one(sql, decode, conn, job, claim, now))
        if earlier is not None:
            return Inserted.of([earlier])
    raise errors.IdempotencyInProgress()


async def _insert_row(
    sql: PostgresExecutor,
    query_name: str,
    params: dict[str, Any],
    tenant_id: str,
    queue_limit: QueueLimit | None,
) -> Row | None:
    """One insert statement; with a queue limit, in a transaction that first takes the
    admission locks and counts (postgres.limits.admit)."""
    if queue_limit is None:
        return await sql.write_one(query_name, **params)
    query = Q[query_name]

    async def admit_and_insert(conn: Conn) -> Row | None:
        await admit(sql, conn, queue_limit, {tenant_id: 1})
        return await conn.fetchrow(query.positional_sql, *query.args(params))

    return await sql.run(admit_and_insert, transaction=True)


async def replay_one(
    sql: PostgresExecutor,
    decode: RowDecoder,
    conn: Conn,
    job: NewJob,
    claim: IdempotencyClaim,
    now: datetime | None,
) -> BulkResult | None:
    """What an earlier submit with this key answered (its job, or the refusal of a key reused
    with another body); None when the key is not bound."""
    where = scope(job, claim)
    seen = await sql.fetch(conn, "idempotency_find", **_find(where, now))
    if not seen:
        return None
    (decision,) = decide([(where, claim.body_hash)], {where: seen[0]["body_hash"]})
    if decision is Decision.CONFLICT:
        return errors.IdempotencyKeyReused()
    existing = await sql.fetch(conn, "job_get", id=seen[0]["job_id"])
    if not existing:
        raise errors.StorageError(f"idempotency key bound to missing job {seen[0]['job_id']}")
    return SubmitOutcome(decode.job(existing[0]), True, seen[0]["status_code"])


async def insert_keyed(
    sql: PostgresExecutor,
    decode: RowDecoder,
    conn: Conn,
    jobs: Sequence[NewJob],
    keys: Sequence[IdempotencyClaim | None],
    queue_limit: QueueLimit | None,
    now: datetime | None,
) -> list[BulkResult]:
    """Many jobs, some keyed, inside the caller's transaction on `conn`: the admission locks,
    the keyless jobs in one statement, the keyed ones in another that binds the first use of
    each key (ON CONFLICT touches a row once per statement) and inserts its job; then the
    bindings it met are read, and decide answers every keyed item; the bounds are counted
    over the new jobs last (raising rolls back)."""
    if queue_limit is not None:  # the admission locks first, as a single submit takes them
        await lock_bounds(sql, conn, queue_limit, {job.tenant_id for job in jobs})
    results: list[BulkResult | None] = [None] * len(jobs)
    keyless = [i for i, claim in enumerate(keys) if claim is None]
    counted = False
    if keyless:
        # Without keyed items to follow the keyless insert would count: there are some.
        stored, counted = await insert_keyless(sql, conn, [jobs[i] for i in keyless], None, now)
        for i, job in zip(keyless, stored, strict=True):
            results[i] = SubmitOutcome(job, False, 202)
    await _bind_keyed(sql, decode, conn, jobs, keys, results, now)
    done = [r for r in results if r is not None]
    if queue_limit is not None and not counted:  # after the inserts: raising rolls back
        new = {r.job.tenant_id: 0 for r in done if isinstance(r, SubmitOutcome) and not r.replayed}
        if new:
            await check_bounds(sql, conn, queue_limit, new)
    return done


async def _bind_keyed(
    sql: PostgresExecutor,
    decode: RowDecoder,
    conn: Conn,
    jobs: Sequence[NewJob],
    keys: Sequence[IdempotencyClaim | None],
    results: list[BulkResult | None],
    now: datetime | None,
) -> None:
    """The keyed items into `results`. The first use of each key goes to the statement (decide
    with nothing bound names them); those it did not insert met a binding, read then in one
    pipelined round trip, and decide is asked again with the bindings met; the jobs of the
    replays of earlier bindings are read in one more."""
    uses = key_uses(jobs, keys)
    firsts: dict[Scope, int] = {}
    for i, (use, decision) in enumerate(zip(uses, decide(uses, {}), strict=True)):
        if use is not None and decision is Decision.NEW:
            firsts[use[0]] = i
    codec = sql.codec
    payloads = []
    for i in firsts.values():
        claim = keys[i]
        assert claim is not None
        # The claim's fields by name: dataclasses.asdict deep-copies.
        binding = {name: getattr(claim, name) for name in IdempotencyClaim.__slots__}
        payloads.append({**insert_payload(jobs[i], codec), **binding})
    rows = await sql.fetch(conn, "job_insert_idempotent_many", jobs=payloads, now=now)
    inserted = {row["id"]: row for row in rows}
    met = [where for where, i in firsts.items() if jobs[i].id not in inserted]
    seen = await fetch_each(conn, "idempotency_find", [_find(w, now) for w in met]) if met else []
    # At most one live binding per key, so one row per key unless a binding went away.
    if len(seen) != len(met):  # the lock wait ended with a binding gone: not expected
        raise errors.IdempotencyInProgress()
    bound = dict(zip(met, seen, strict=True))
    earlier_jobs: dict[str, Row] = {}
    if bound:
        ids = [{"id": binding["job_id"]} for binding in bound.values()]
        earlier_jobs = {row["id"]: row for row in await fetch_each(conn, "job_get", ids)}
    decisions = decide(uses, {where: binding["body_hash"] for where, binding in bound.items()})
    stored: dict[Scope, Job] = {}
    for i, (use, decision) in enumerate(zip(uses, decisions, strict=True)):
        if use is None:
            continue
        where = use[0]
        if decision is Decision.NEW:
            stored[where] = job = stored_job(jobs[i], inserted[jobs[i].id])
            results[i] = SubmitOutcome(job, False, 202)
        elif decision is Decision.CONFLICT:
            results[i] = errors.IdempotencyKeyReused()
        elif where in bound:
            held = bound[where]
            row = earlier_jobs.get(held["job_id"])
            if row is None:
                raise errors.StorageError(f"idempotency key bound to missing job {held['job_id']}")
            results[i] = SubmitOutcome(decode.job(row), True, held["status_code"])
        else:  # bound by this call's first use of the key
            first = keys[firsts[where]]
            assert first is not None
            results[i] = SubmitOutcome(stored[where], True, first.status_code)


def _find(where: Scope, now: datetime | None) -> dict[str, Any]:
    tenant_id, route, key = where
    return {"tenant_id": tenant_id, "route": route, "key": key, "now": now}


async def insert_streamed(
    sql: PostgresExecutor, chunks: Iterable[Sequence[NewJob]], now: datetime | None
) -> list[Job]:
    """One job_insert_many per chunk in one transaction, pipelined: each statement is sent,
    then the rows of the one before are answered and the next chunk is made while PostgreSQL
    inserts (the process and the database work side by side, where one batch statement made
    them take turns)."""

    async def insert(conn: Conn) -> list[Job]:
        stored: list[Job] = []
        in_flight: asyncio.Task[list[Row]] | None = None
        sent: Sequence[NewJob] = ()
        try:
            for jobs in chunks:  # making a chunk: while the previous one is inserted
                if not jobs:
                    continue
                payload, shared = insert_payloads(jobs, sql.codec)
                rows = None if in_flight is None else await in_flight
                in_flight = asyncio.ensure_future(
                    sql.fetch(conn, "job_insert_many", jobs=payload, shared=shared, now=now)
                )
                await asyncio.sleep(0)  # the statement goes out before the work below
                if rows is not None:
                    stored.extend(answers(sent, rows))
                sent = jobs
            if in_flight is not None:
                stored.extend(answers(sent, await in_flight))
                in_flight = None
        finally:
            if in_flight is not None and not in_flight.done():
                # Making a chunk raised (or this call was cancelled): the statement on the
                # wire ends before the transaction rolls back on this connection.
                await asyncio.wait([in_flight])
            if in_flight is not None and not in_flight.cancelled():
                in_flight.exception()  # retrieved: the rollback is what counts
        return stored

    return await sql.run(insert, transaction=True)
