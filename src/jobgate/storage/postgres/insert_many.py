"""Keyless jobs on PostgreSQL: one INSERT ... SELECT from a JSON array, behind the admission
locks when a queue limit applies (insert_keyless, insert_many_on: postgres.insert's and a
batch chunk's); and how a new job travels to the insert statements."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any

from jobgate.domain.job import Job, NewJob
from jobgate.storage.executor import Codec, Row
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.postgres.limits import check_bounds, judge_tenant, judge_total, lock_bounds
from jobgate.storage.records import QueueLimit
from jobgate.storage.store.insert import new_job_fields, stored_job


def insert_params(job: NewJob, codec: Codec) -> dict[str, Any]:
    """A new job as job_insert and job_insert_idempotent take it (the SQL computes its times)."""
    return {
        **new_job_fields(job, codec.json),
        "start_timeout_s": job.start_timeout_s,
        "run_at": job.run_at,
        "delay_s": job.delay_s,
    }


def insert_payload(job: NewJob, codec: Codec) -> dict[str, Any]:
    """A new job as the JSON arrays of job_insert_many and job_insert_idempotent_many take it
    (a time as ISO text): insert_params' members in one dict per job, less each member whose
    value the statements would read as they read a missing one: jsonb_to_recordset reads a
    missing member as NULL, as it reads a null, and the insert takes a NULL delay_s as 0 and a
    NULL metadata as {} (the new_job_insert and new_job_run_at fragments). The usual job has
    about half its members left: fewer to write, and less for PostgreSQL to parse."""
    payload = _row(job, codec)  # the members not in SHARED
    for name in SHARED:
        if (value := getattr(job, name)) is not None:
            payload[name] = value
    return payload


# The members of a new job that a batch's jobs usually have alike (one tenant's calls to one
# endpoint): job_insert_many and job_insert_many_counted take them once, as :shared.
SHARED = (
    "tenant_id",
    "api",
    "provider",
    "endpoint",
    "model",
    "priority",
    "max_attempts",
    "execution_timeout_s",
)
_shared_of = attrgetter(*SHARED)
_member_of = {name: attrgetter(name) for name in SHARED}


def insert_payloads(
    jobs: Sequence[NewJob], codec: Codec
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`jobs` (not empty) as job_insert_many and job_insert_many_counted take them: a JSON array
    of one object per job (:jobs) and one object of the SHARED members every job has alike
    (:shared), each such member left out of the jobs' objects: the statements coalesce the two
    (the new_job_columns fragment). Otherwise as insert_payload: a member the statements read as
    a missing one is left out (a null among them). PostgreSQL parses what the jobs share once
    per statement instead of once per job. Members alike are equal values (NewJob's fields are
    typed: str, int, float or None), sent as the first job has them."""
    if len(set(map(_shared_of, jobs))) == 1:  # the usual batch: one tenant, one endpoint
        first = jobs[0]
        shared = {name: value for name in SHARED if (value := getattr(first, name)) is not None}
        return [_row(job, codec) for job in jobs], shared
    own = [name for name in SHARED if len(set(map(_member_of[name], jobs))) > 1]
    first = jobs[0]
    shared = {
        name: value
        for name in SHARED
        if name not in own and (value := getattr(first, name)) is not None
    }
    rows = [_row(job, codec) for job in jobs]
    for name in own:
        for row, value in zip(rows, map(_member_of[name], jobs), strict=True):
            if value is not None:
                row[name] = value
    return rows, shared


def _row(job: NewJob, codec: Codec) -> dict[str, Any]:
    """insert_payload of `job` without its SHARED members."""
    json = codec.json
    payload: dict[str, Any] = {"id": job.id, "request": json(job.request)}
    if job.metadata:  # coalesce(v.metadata, '{}')
        payload["metadata"] = json(job.metadata)
    if job.webhook is not None:
        payload["webhook"] = json(job.webhook)
    if job.start_timeout_s is not None:
        payload["start_timeout_s"] = job.start_timeout_s
    if job.run_at is not None:
        payload["run_at"] = job.run_at.isoformat()
    if job.delay_s:  # coalesce(v.delay_s, 0)
        payload["delay_s"] = job.delay_s
    if job.concurrency_key is not None:
        payload["concurrency_key"] = job.concurrency_key
    if job.model_route is not None:
        payload["model_route"] = job.model_route
    return payload


async def insert_keyless(
    sql: PostgresExecutor,
    conn: Conn,
    jobs: Sequence[NewJob],
    queue_limit: QueueLimit | None,
    now: datetime | None,
) -> tuple[list[Job], bool]:
    """Insert `jobs` (not empty) in one statement, the admission locks held; answers them in
    order, and whether it also judged `queue_limit`: it does for one tenant's jobs, counting
    its queued jobs and everyone's in the same statement (job_insert_many_counted), so that the
    usual batch makes no statement of its own for its bounds (raises errors.QueueFull). Else
    the caller counts after its inserts."""
    payload, shared = insert_payloads(jobs, sql.codec)
    tenant_id = jobs[0].tenant_id
    counted = (
        queue_limit is not None
        and (queue_limit.tenant_max, queue_limit.total_max) != (None, None)
        and all(job.tenant_id == tenant_id for job in jobs)
    )
    if counted:
        rows = await sql.fetch(
            conn,
            "job_insert_many_counted",
            jobs=payload,
            shared=shared,
            tenant_id=tenant_id,
            now=now,
        )
    else:
        rows = await sql.fetch(conn, "job_insert_many", jobs=payload, shared=shared, now=now)
    stored = answers(jobs, rows)
    if counted:  # the counts are from before the insert: add what it inserted
        assert queue_limit is not None
        judge_tenant(queue_limit, rows[0]["queued_tenant"] + len(rows))
        judge_total(queue_limit, rows[0]["queued_total"] + len(rows))
    return stored, counted


async def insert_many_on(
    sql: PostgresExecutor,
    conn: Conn,
    jobs: Sequence[NewJob],
    queue_limit: QueueLimit | None,
    now: datetime | None,
) -> list[Job]:
    """Insert `jobs` (not empty) inside the caller's transaction on `conn`, within
    `queue_limit`: the admission locks, then insert_keyless (raises errors.QueueFull)."""
    if queue_limit is not None:  # the admission locks first, as a single submit takes them
        await lock_bounds(sql, conn, queue_limit, {job.tenant_id for job in jobs})
    stored, counted = await insert_keyless(sql, conn, jobs, queue_limit, now)
    if queue_limit is not None and not counted:  # after the insert: raising rolls back
        await check_bounds(sql, conn, queue_limit, {job.tenant_id: 0 for job in jobs})
    return stored


def answers(jobs: Sequence[NewJob], rows: Sequence[Row]) -> list[Job]:
    """The stored jobs of one insert, in the order of `jobs`."""
    by_id = {row["id"]: row for row in rows}
    return [stored_job(job, by_id[job.id]) for job in jobs]
