"""Claim latency with a large history vs none, and what retention does to it.

`python -m bench.claim_history [--jobs N] [--events-per-job K]` on a throwaway PostgreSQL
database (JOBGATE_TEST_DATABASE_URL's server): claims of 10 from 2,000 queued jobs on an
empty database; the same after loading N finished jobs with K events each (a history past
the retention period); while retention deletes that history in batches of 500 (timed); and
after. Prints one JSON object of figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import timedelta
from typing import Any

import asyncpg
from tests.support.databases import admin_dsn, dsn_for

from jobgate.config import Settings
from jobgate.domain.job import NewJob
from jobgate.roles.retention import Retention
from jobgate.storage.postgres.store import PostgresStore, postgres_store

QUEUED = 2_000
CLAIM = 10
TENANTS = 4

HISTORY = """
INSERT INTO jobs (id, tenant_id, state, provider, endpoint, model, request, result, metadata,
                  run_at, created_at, updated_at, started_at, completed_at, attempt,
                  event_seq, transition_actor, transition_reason)
SELECT 'job_old_' || lpad(g::text, 9, '0'), 'ten_' || (g % $2), 'succeeded', 'sim',
       '/v1/chat/completions', 'sim-echo', '{"model": "sim-echo"}', '{"ok": true}', '{}',
       now() - interval '30 days', now() - interval '30 days', now() - interval '30 days',
       now() - interval '30 days', now() - interval '30 days', 1, $3, 'bench', 'history'
  FROM generate_series(1, $1) AS g
"""
EVENTS = """
INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
SELECT 'job_old_' || lpad(g::text, 9, '0'), s, 'queued', 'running', 'bench', 'history', true,
       now() - interval '30 days'
  FROM generate_series(1, $1) AS g, generate_series(1, $2 - 1) AS s
"""


async def claim_timings(storage: PostgresStore, tenant_ids: list[str]) -> list[float]:
    """Milliseconds per claim of 10, draining 2,000 fresh queued jobs (then removed)."""
    jobs = [
        NewJob(
            id=f"job_q_{time.monotonic_ns()}_{i}",
            tenant_id=tenant_ids[i % len(tenant_ids)],
            provider="sim",
            endpoint="/v1/chat/completions",
            model="sim-echo",
            request={"model": "sim-echo"},
            metadata={},
        )
        for i in range(QUEUED)
    ]
    for start in range(0, QUEUED, 500):
        await storage.job_insert(chunks=[jobs[start : start + 500]])
    timings = []
    while True:
        began = time.perf_counter()
        got = await storage.job_claim(worker_id="bench", limit=CLAIM, lease_ttl_s=60)
        timings.append((time.perf_counter() - began) * 1000)
        if not got:
            break
    timings.pop()  # the empty one
    ids = [job.id for job in jobs]  # by id: a LIKE would read every row of a long history
    async with storage.engine.executor._pool.acquire() as conn:  # type: ignore[union-attr]
        await conn.execute("DELETE FROM job_events WHERE job_id = ANY($1::text[])", ids)
        await conn.execute("DELETE FROM jobs WHERE id = ANY($1::text[])", ids)
    return timings


def summary(timings: list[float]) -> dict[str, float]:
    timings = sorted(timings)
    return {
        "claims": len(timings),
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(timings[int(len(timings) * 0.95)], 2),
    }


async def claims(storage: PostgresStore, tenant_ids: list[str]) -> dict[str, float]:
    return summary(await claim_timings(storage, tenant_ids))


async def main(jobs: int, events_per_job: int) -> dict[str, Any]:
    name = f"jobgate_claim_history_{int(time.time())}"
    admin = await asyncpg.connect(admin_dsn())
    await admin.execute(f'CREATE DATABASE "{name}"')
    storage = postgres_store(dsn_for(name), pool_size=3)
    figures: dict[str, Any] = {"history_jobs": jobs, "history_events": jobs * events_per_job}
    try:
        await storage.open()
        await storage.migrate()
        tenant_ids = []
        for i in range(TENANTS):
            tenant = await storage.tenant_create(
                tenant_id=f"ten_{i}", name=f"t{i}", webhook_secret="whsec_x"
            )
            tenant_ids.append(tenant.id)
        figures["empty"] = await claims(storage, tenant_ids)
        async with storage.engine.executor._pool.acquire() as conn:  # type: ignore[union-attr]
            began = time.perf_counter()
            await conn.execute(HISTORY, jobs, TENANTS, events_per_job)  # 1 event by trigger
            await conn.execute(EVENTS, jobs, events_per_job)
            await conn.execute("ANALYZE")
            figures["load_s"] = round(time.perf_counter() - began, 1)
            figures["events_rows"] = await conn.fetchval("SELECT count(*) FROM job_events")
        figures["with_history"] = await claims(storage, tenant_ids)
        retention = Retention(
            storage=storage,
            settings=Settings(database_url="sqlite:///unused.db"),
            batch_size=500,
            max_batches=10**9,
        )
        swept_s: list[float] = []

        async def timed_sweep() -> dict[str, int]:
            began = time.perf_counter()
            deleted = await retention.sweep_once(now=horizon_now)
            swept_s.append(time.perf_counter() - began)
            return deleted

        horizon_now = await storage.database_now() + timedelta(days=1)
        sweep = asyncio.create_task(timed_sweep())
        during: list[float] = []
        while not sweep.done():  # claims go on while retention deletes, batch by batch
            during += await claim_timings(storage, tenant_ids)
        deleted = await sweep
        elapsed = swept_s[0]
        figures["during_retention"] = summary(during)
        figures["retention"] = {
            "deleted": deleted,
            "seconds": round(elapsed, 1),
            "jobs_per_s": round(deleted["jobs"] / elapsed),
            "rows_per_s": round(sum(deleted.values()) / elapsed),
        }
        async with storage.engine.executor._pool.acquire() as conn:  # type: ignore[union-attr]
            await conn.execute("VACUUM ANALYZE jobs")
            await conn.execute("VACUUM ANALYZE job_events")
        figures["after_retention"] = await claims(storage, tenant_ids)
    finally:
        await storage.close()
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=300_000)
    parser.add_argument("--events-per-job", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.jobs, args.events_per_job)), indent=1))
