"""The PostgreSQL claim finds the tenants with queued jobs through jobs_claimable (queued jobs
only), never by walking a tenant's jobs oldest first (jobs_by_tenant) past the ones that have
finished: with statistics taken while everything was queued (a drain that autovacuum has not
caught up with), that walk made every claim of a drain cost more than the last."""

from __future__ import annotations

import json

import asyncpg
import pytest

from jobgate.storage.postgres.claims import claim_params
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.records import ClaimPolicy, ClaimRequest
from tests.storage.helpers import insert_many, make_tenant, new_job
from tests.storage.pg_plans import PLAN_MODES, explained, nodes

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]

JOBS = 400
FINISHED = 300  # the oldest, as a drain leaves them


async def test_a_drains_claims_do_not_walk_its_finished_jobs(pg_dsn: str) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage, "drained")
        await insert_many(storage, jobs=[new_job(tenant) for _ in range(JOBS)])
    finally:
        await storage.close()
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("ANALYZE jobs")  # every job queued, as a filled queue is analysed
        await conn.execute(
            "UPDATE jobs SET state = 'succeeded', completed_at = now(), event_seq = event_seq + 1,"
            " transition_actor = 'test', transition_reason = 'completed'"
            " WHERE id IN (SELECT id FROM jobs ORDER BY created_at, id LIMIT $1)",
            FINISHED,
        )
        claim = ClaimRequest("w", 64, 60.0, ClaimPolicy(), None, None)
        params = claim_params(claim)
        params["shares"] = json.dumps(params["shares"])  # jsonb: the pool's codec is not here
        params["blocked_keys"] = json.dumps(params["blocked_keys"])
        for mode in PLAN_MODES:  # both must read jobs_claimable
            plan = await explained(conn, "job_claim", params, mode)
            assert plan["Actual Rows"] == 64
            waiting = next(
                node for node in nodes(plan) if node.get("Subplan Name") == "CTE waiting"
            )
            scans = nodes(waiting)
            indexes = {node.get("Index Name") for node in scans}
            assert "jobs_claimable" in indexes and "jobs_by_tenant" not in indexes, (mode, indexes)
            assert sum(node.get("Rows Removed by Filter", 0) for node in scans) == 0, mode
    finally:
        await conn.close()
