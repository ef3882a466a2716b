"""The PostgreSQL claim and finish never read every running job through jobs_running.

Each job that leaves 'running' leaves an entry in jobs_running until a vacuum. With statistics
that count few running jobs (taken while the queue filled), the planner read all running jobs
through that index for every claim (the count of each tenant's running jobs) and every finish
(the verdicts joined against them), in bitmap scans, which never mark such entries dead: under
a steady stream of submits each small claim and finish revisited thousands of heap pages. Now
the finish finds its jobs by primary key, and the claim counts a tenant's running jobs only
where the count decides something (under a cap, or between two tenants)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from jobgate.domain import verdicts
from jobgate.storage.postgres.claims import claim_params
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.records import ClaimPolicy, ClaimRequest, TenantShare
from tests.storage.helpers import insert_many, make_tenant, new_job
from tests.storage.pg_plans import PLAN_MODES, explained, nodes

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]

LEFT_RUNNING = 150  # the jobs_running entries: 150 live, FINISHED dead
FINISHED = 250
QUEUED = 20


def _reads_of(plan: dict[str, Any], index: str) -> int:
    """How many times the plan's nodes on `index` ran."""
    return sum(
        node.get("Actual Loops", 0) for node in nodes(plan) if node.get("Index Name") == index
    )


async def _churned(dsn: str, tenants: int = 1) -> list[tuple[str, str]]:
    """A queue as a busy hour leaves it, analysed while it only held queued jobs: FINISHED
    jobs have been through 'running', LEFT_RUNNING still run, QUEUED per tenant wait. Answers
    the running jobs' (id, lease token)."""
    storage = postgres_store(dsn, pool_size=2)
    await storage.open()
    try:
        first = await make_tenant(storage, "churned")
        others = [await make_tenant(storage, f"other{i}") for i in range(tenants - 1)]
        await insert_many(storage, jobs=[new_job(first) for _ in range(LEFT_RUNNING + FINISHED)])
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("ANALYZE jobs")  # nothing running yet
        finally:
            await conn.close()
        claimed = await storage.job_claim(
            worker_id="w", limit=LEFT_RUNNING + FINISHED, lease_ttl_s=600
        )
        done = [
            verdicts.succeeded(job, actor="worker", result={"ok": True}, usage={})
            for job in claimed[:FINISHED]
        ]
        await storage.job_finish_many(finishes=done)
        for tenant in [first, *others]:
            await insert_many(storage, jobs=[new_job(tenant) for _ in range(QUEUED)])
        return [(job.id, job.lease_token or "") for job in claimed[FINISHED:]]
    finally:
        await storage.close()


def _claim(limit: int, policy: ClaimPolicy, ids: list[str] | None = None) -> dict[str, Any]:
    params = claim_params(ClaimRequest("w2", limit, 60.0, policy, None, None, ids=ids))
    params["shares"] = json.dumps(params["shares"])  # jsonb: the pool's codec is not here
    params["blocked_keys"] = json.dumps(params["blocked_keys"])
    return params


async def test_a_finish_finds_its_jobs_by_primary_key(pg_dsn: str) -> None:
    running = await _churned(pg_dsn)
    payload = [
        {"id": job_id, "token": token, "state": "succeeded", "actor": "worker", "reason": "ok"}
        for job_id, token in running[:5]
    ]
    params = {"finishes": json.dumps(payload), "now": None, "expired_only": False}
    conn = await asyncpg.connect(pg_dsn)
    try:
        for mode in PLAN_MODES:
            plan = await explained(conn, "job_finish", params, mode)
            assert plan["Actual Rows"] == 5, mode
            assert _reads_of(plan, "jobs_running") == 0, mode
            assert _reads_of(plan, "jobs_pkey") >= 1, mode
    finally:
        await conn.close()


async def test_a_lone_uncapped_tenants_claim_counts_nothing(pg_dsn: str) -> None:
    await _churned(pg_dsn)
    conn = await asyncpg.connect(pg_dsn)
    try:
        for mode in PLAN_MODES:
            plan = await explained(conn, "job_claim", _claim(QUEUED, ClaimPolicy()), mode)
            assert plan["Actual Rows"] == QUEUED, mode
            assert _reads_of(plan, "jobs_running") == 0, mode
    finally:
        await conn.close()


async def test_a_cap_counts_the_running_jobs(pg_dsn: str) -> None:
    await _churned(pg_dsn)
    capped = ClaimPolicy(default=TenantShare(max_running=LEFT_RUNNING + 3))
    conn = await asyncpg.connect(pg_dsn)
    try:
        for mode in PLAN_MODES:
            plan = await explained(conn, "job_claim", _claim(QUEUED, capped), mode)
            assert plan["Actual Rows"] == 3, mode  # the cap's free slots, not the queue
    finally:
        await conn.close()


async def test_two_waiting_tenants_share_by_their_running_jobs(pg_dsn: str) -> None:
    """`churned` runs LEFT_RUNNING jobs, `other0` none: every slot of a claim the size of
    the other's queue goes to the tenant running nothing."""
    await _churned(pg_dsn, tenants=2)
    conn = await asyncpg.connect(pg_dsn)
    try:
        for mode in PLAN_MODES:
            plan = await explained(conn, "job_claim", _claim(QUEUED, ClaimPolicy()), mode)
            assert plan["Actual Rows"] == QUEUED, mode
            rows = await conn.fetch(
                "SELECT tenant_id, count(*) FROM jobs WHERE state = 'queued' GROUP BY 1"
            )
            assert {r["tenant_id"]: r["count"] for r in rows} == {
                "ten_churned": QUEUED,
                "ten_other0": QUEUED,
            }  # rolled back
        claim = await _claimed(pg_dsn, QUEUED)
        assert claim == {"ten_other0": QUEUED}
    finally:
        await conn.close()


async def test_a_claim_by_id_counts_running_jobs_only_under_a_cap(pg_dsn: str) -> None:
    await _churned(pg_dsn)
    conn = await asyncpg.connect(pg_dsn)
    try:
        ids = [r["id"] for r in await conn.fetch("SELECT id FROM jobs WHERE state = 'queued'")]
        capped = ClaimPolicy(default=TenantShare(max_running=LEFT_RUNNING + 3))
        for mode in PLAN_MODES:
            plan = await explained(
                conn, "job_claim_by_id", _claim(QUEUED, ClaimPolicy(), ids), mode
            )
            assert plan["Actual Rows"] == QUEUED, mode
            assert _reads_of(plan, "jobs_running") == 0, mode
            plan = await explained(conn, "job_claim_by_id", _claim(QUEUED, capped, ids), mode)
            assert plan["Actual Rows"] == 3, mode
    finally:
        await conn.close()


async def _claimed(dsn: str, limit: int) -> dict[str, int]:
    storage = postgres_store(dsn, pool_size=2)
    await storage.open()
    try:
        jobs = await storage.job_claim(worker_id="w3", limit=limit, lease_ttl_s=60)
    finally:
        await storage.close()
    counts: dict[str, int] = {}
    for job in jobs:
        counts[job.tenant_id] = counts.get(job.tenant_id, 0) + 1
    return counts
