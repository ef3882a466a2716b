"""On PostgreSQL a job's first event is implied by its row (migration 0028): every insert path
stores no event row for it, yet the log (`job_event_log`, read by `Storage.job_events`, the
console and the audit) holds it exactly once, as the row said: 'queued' at seq 1 by 'api' for
'submitted', at the job's creation. A row created otherwise still gets a stored first event; a
job inserted before 0028 (a stored first event) reads it once, not twice. The console's read of
the last minute reads the recent jobs as a range of jobs_by_creation, in order, and probes
their stored first events by key, never all of them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from jobgate.domain.job import JobEvent, NewJob
from jobgate.domain.states import JobState
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.records import BulkItem, IdempotencyClaim
from tests.storage.helpers import (
    insert_bulk,
    insert_many,
    insert_streamed,
    make_tenant,
    new_job,
    submit_one,
)
from tests.storage.pg_plans import explained, nodes

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]


def _claim(key: str) -> IdempotencyClaim:
    return IdempotencyClaim(route="r", key=key, body_hash="h", status_code=202, ttl_s=3600)


async def _stored_events(dsn: str, job_ids: list[str]) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        count: int = await conn.fetchval(
            "SELECT count(*) FROM job_events WHERE job_id = ANY($1::text[])", job_ids
        )
        return count
    finally:
        await conn.close()


def _first(event: JobEvent) -> tuple[Any, ...]:
    return (event.job_id, event.seq, event.from_state, event.to_state, event.actor, event.reason)


async def test_every_insert_path_implies_the_first_event_and_the_log_reads_it_once(
    pg_dsn: str,
) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage, "implied")
        single = (await submit_one(storage, job=new_job(tenant))).job
        keyed = (await submit_one(storage, job=new_job(tenant), idempotency=_claim("k1"))).job
        many = await insert_many(storage, jobs=[new_job(tenant) for _ in range(3)])
        streamed = await insert_streamed(
            storage, chunks=[[new_job(tenant)], [new_job(tenant), new_job(tenant)]]
        )
        bulk = await insert_bulk(
            storage, items=[BulkItem(new_job(tenant), _claim("k2")), BulkItem(new_job(tenant))]
        )
        jobs = [single, keyed, *many, *streamed]
        jobs += [r.job for r in bulk if not isinstance(r, Exception)]
        assert len(jobs) == 10
        ids = [job.id for job in jobs]
        assert await _stored_events(pg_dsn, ids) == 0  # no event row written at insert

        for job in jobs:
            (event,) = await storage.job_events(job_id=job.id)
            assert _first(event) == (
                job.id, 1, None, JobState.QUEUED, "api", "submitted"
            )  # fmt: skip
            assert event.applied and event.created_at == job.created_at

        # The next transition is stored at seq 2 and read after the implied one.
        (claimed,) = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60)
        events = await storage.job_events(job_id=claimed.id)
        assert [(e.seq, e.from_state, e.to_state) for e in events] == [
            (1, None, JobState.QUEUED),
            (2, JobState.QUEUED, JobState.RUNNING),
        ]
        assert [e.seq for e in await storage.job_events(job_id=claimed.id, after_seq=1)] == [2]
        assert await _stored_events(pg_dsn, ids) == 1
    finally:
        await storage.close()


async def test_a_row_created_otherwise_stores_its_first_event_and_old_ones_read_once(
    pg_dsn: str,
) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage, "otherwise")
        plain = await insert_many(storage, jobs=[new_job(tenant)])
    finally:
        await storage.close()
    conn = await asyncpg.connect(pg_dsn)
    try:
        # A row inserted another way (an actor no insert path uses): the trigger stores it.
        await conn.execute(
            "INSERT INTO jobs (id, tenant_id, state, api, provider, endpoint, request,"
            " metadata, priority, max_attempts, run_at, created_at, updated_at, event_seq,"
            " transition_actor, transition_reason)"
            " VALUES ('job_otherwise', $1, 'queued', 'native', 'sim', '/v1/chat/completions',"
            " '{}', '{}', 0, 3, now(), now(), now(), 1, 'import', 'migrated')",
            tenant.id,
        )
        # A job from before 0028: its first event was stored beside it.
        await conn.execute(
            "INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied,"
            " created_at, job_created_at) SELECT id, 1, NULL, 'queued', 'api', 'submitted',"
            " true, created_at, created_at FROM jobs WHERE id = $1",
            plain[0].id,
        )
        rows = await conn.fetch(
            "SELECT job_id, seq, actor, reason FROM job_event_log"
            " WHERE job_id = ANY($1::text[]) ORDER BY job_id, seq",
            ["job_otherwise", plain[0].id],
        )
    finally:
        await conn.close()
    assert sorted(tuple(r) for r in rows) == sorted(
        [("job_otherwise", 1, "import", "migrated"), (plain[0].id, 1, "api", "submitted")]
    )


async def test_the_consoles_minute_reads_recent_jobs_not_every_first_event(pg_dsn: str) -> None:
    """20,000 jobs from before 0028 (stored first events) and 100 recent ones: the console's
    read of the last minute finds the recent jobs through jobs_by_creation and each one's
    stored first event (none) by primary key, never all 20,000 stored first events."""
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage, "console")
        old: list[NewJob] = [new_job(tenant) for _ in range(20_000)]
        two_days_ago = datetime.now(UTC) - timedelta(days=2)
        for start in range(0, len(old), 2_000):
            await insert_many(storage, jobs=old[start : start + 2_000], now=two_days_ago)
        conn = await asyncpg.connect(pg_dsn)
        try:
            await conn.execute(
                "INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason,"
                " applied, created_at, job_created_at) SELECT id, 1, NULL, 'queued', 'api',"
                " 'submitted', true, created_at, created_at FROM jobs"
            )
            await insert_many(storage, jobs=[new_job(tenant) for _ in range(100)])
            await conn.execute("VACUUM ANALYZE jobs")
            await conn.execute("VACUUM ANALYZE job_events")
            since = await conn.fetchval("SELECT now() - interval '1 minute'")
            plan = await explained(
                conn, "console_transitions", {"since": since, "limit": 1_000}, "force_custom_plan"
            )
        finally:
            await conn.close()
    finally:
        await storage.close()
    assert plan["Actual Rows"] == 100, json.dumps(plan)[:2_000]
    scans = {n.get("Index Name") for n in nodes(plan) if n.get("Relation Name") == "jobs"}
    assert "jobs_by_creation" in scans, json.dumps(plan)[:2_000]
    read = sum(
        n["Actual Rows"] * n.get("Actual Loops", 1)
        for n in nodes(plan)
        if n.get("Relation Name") == "job_events"
    )
    assert read < 1_000, json.dumps(plan)[:2_000]
