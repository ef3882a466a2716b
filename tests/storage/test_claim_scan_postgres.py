"""The PostgreSQL claim finds the tenants with queued jobs through jobs_claimable (queued jobs
only), never by walking a tenant's jobs oldest first (jobs_by_tenant) past the ones that have
finished: with statistics taken while everything was queued (a drain that autovacuum has not
caught up with), that walk made every claim of a drain cost more than the last."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from jobgate.storage.postgres.executor import Q
from jobgate.storage.postgres.store import PostgresStorage
from jobgate.storage.postgres.transport import claim_params
from jobgate.storage.records import ClaimPolicy, ClaimRequest
from tests.storage.helpers import make_tenant, new_job

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]

JOBS = 400
FINISHED = 300  # the oldest, as a drain leaves them


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A JSON plan's nodes, depth first."""
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(_nodes(child))
    return found


async def test_a_drains_claims_do_not_walk_its_finished_jobs(pg_dsn: str) -> None:
    storage = PostgresStorage(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage, "drained")
        await storage.job_insert_many(jobs=[new_job(tenant) for _ in range(JOBS)])
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
        query = Q["job_claim"]
        claim = ClaimRequest("w", 64, 60.0, ClaimPolicy(), None, None)
        params = claim_params(claim)
        params["shares"] = json.dumps(params["shares"])  # jsonb: the pool's codec is not here
        args = query.args(params)
        # The plan a fresh connection uses (custom) and the one asyncpg settles on after five
        # executions of its prepared statement (generic): both must read jobs_claimable.
        for mode in ("force_custom_plan", "force_generic_plan"):
            # EXPLAIN ANALYZE claims for real: rolled back, the queue stays as it was.
            transaction = conn.transaction()
            await transaction.start()
            try:
                await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                explain = "EXPLAIN (ANALYZE, FORMAT JSON) " + query.positional_sql
                (plan,) = json.loads(await (await conn.prepare(explain)).fetchval(*args))
            finally:
                await transaction.rollback()
            assert plan["Plan"]["Actual Rows"] == 64
            waiting = next(
                node for node in _nodes(plan["Plan"]) if node.get("Subplan Name") == "CTE waiting"
            )
            scans = _nodes(waiting)
            indexes = {node.get("Index Name") for node in scans}
            assert "jobs_claimable" in indexes and "jobs_by_tenant" not in indexes, (mode, indexes)
            assert sum(node.get("Rows Removed by Filter", 0) for node in scans) == 0, mode
    finally:
        await conn.close()
