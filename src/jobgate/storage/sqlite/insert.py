"""The insert on SQLite (Storage.job_insert): the whole call in one write operation of the
single writer (one transaction, one fsync, the writer thread's group commit doing the rest):
the bindings in place read, domain.idempotency.decide asked, keys bound and rows inserted, the
bounds counted last (raising rolls all of it back). The single writer makes the bounds exact
without PostgreSQL's admission locks, and the decision final without its retries."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from jobgate import errors
from jobgate.domain.idempotency import Decision, Scope, decide
from jobgate.domain.job import Job, NewJob
from jobgate.storage.executor import Row
from jobgate.storage.records import (
    BulkResult,
    IdempotencyClaim,
    Inserted,
    QueueLimit,
    SubmitOutcome,
)
from jobgate.storage.rows import MAX_INTERVAL_S, RowDecoder, unix_time
from jobgate.storage.sqlite.executor import Q, json_text
from jobgate.storage.store.insert import key_uses, new_job_fields, stored_job


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


def insert_job(conn: sqlite3.Connection, job: NewJob, at: float) -> Job:
    """Insert `job` at `at`; the row is not read back, its times being computed here."""
    params = insert_params(job, at)
    conn.execute(Q["job_insert"].sql, params)
    times = {"created_at": at, "run_at": params["run_at"], "expires_at": params["expires_at"]}
    return stored_job(job, {k: unix_time(t) for k, t in times.items()})


def insert_items(
    conn: sqlite3.Connection,
    jobs: Sequence[NewJob],
    keys: Sequence[IdempotencyClaim | None] | None,
    queue_limit: QueueLimit | None,
    at: float,
    decode: RowDecoder,
) -> Inserted:
    """Insert `jobs` at `at` inside the caller's write (their keys, one per job, replayed or
    bound), then count the bounds: raising errors.QueueFull rolls the whole write back."""
    if keys is None:
        inserted = Inserted([insert_job(conn, job, at) for job in jobs])
    else:
        inserted = Inserted.of(_insert_keyed(conn, jobs, keys, at, decode))
    if queue_limit is not None and inserted.jobs:
        # Counted after the inserts: raising rolls the whole call back.
        for tenant_id in {job.tenant_id for job in inserted.jobs}:
            count = conn.execute(Q["queued_count_many"].sql, {"tenant_id": tenant_id}).fetchone()
            if queue_limit.tenant_max is not None and (
                count["tenant_queued"] > queue_limit.tenant_max
            ):
                raise errors.QueueFull("max_queued", 0)
            if queue_limit.total_max is not None and (
                count["total_queued"] > queue_limit.total_max
            ):
                raise errors.QueueFull("max_queued_total", 0)
    return inserted


def _insert_keyed(
    conn: sqlite3.Connection,
    jobs: Sequence[NewJob],
    keys: Sequence[IdempotencyClaim | None],
    at: float,
    decode: RowDecoder,
) -> list[BulkResult]:
    """Each job with its key: the live bindings of the call's keys read, decide asked, then
    each new job's key bound and its row inserted; a replay answers the bound job (bound
    before the call, or by the call's first item with that key)."""
    uses = key_uses(jobs, keys)
    bound: dict[Scope, Row] = {}
    for use in uses:
        if use is not None and use[0] not in bound:
            seen = conn.execute(Q["idempotency_find"].sql, _find(use[0], at)).fetchone()
            if seen is not None:
                bound[use[0]] = seen
    decisions = decide(uses, {where: row["body_hash"] for where, row in bound.items()})
    results: list[BulkResult] = []
    firsts: dict[Scope, SubmitOutcome] = {}  # each key bound here: its replay
    for job, claim, use, decision in zip(jobs, keys, uses, decisions, strict=True):
        if decision is Decision.CONFLICT:
            results.append(errors.IdempotencyKeyReused())
        elif decision is Decision.NEW:
            if claim is not None:
                where = (job.tenant_id, claim.route, claim.key)
                binding = {
                    "body_hash": claim.body_hash,
                    "job_id": job.id,
                    "status_code": claim.status_code,
                    "expires_at": at + claim.ttl_s,
                }
                conn.execute(Q["idempotency_bind"].sql, {**_find(where, at), **binding})
            stored = insert_job(conn, job, at)
            if claim is not None:
                firsts[where] = SubmitOutcome(stored, True, claim.status_code)
            results.append(SubmitOutcome(stored, False, 202))
        else:
            assert use is not None
            seen = bound.get(use[0])
            if seen is None:  # bound by this call's first item with the key
                results.append(firsts[use[0]])
            else:
                row = conn.execute(Q["job_get"].sql, {"id": seen["job_id"]}).fetchone()
                results.append(SubmitOutcome(decode.job(row), True, seen["status_code"]))
    return results


def _find(where: Scope, at: float) -> dict[str, Any]:
    tenant_id, route, key = where
    return {"tenant_id": tenant_id, "route": route, "key": key, "now": at}
