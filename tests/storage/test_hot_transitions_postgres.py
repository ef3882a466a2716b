"""PostgreSQL's hot statements log themselves (migration 0024): a claim and a batched finish
write the job_events rows of what they moved in their own statement and send its wake-ups, and
a heartbeat tells the job trigger it moved nothing, so the trigger skips the joins of its wide
transition tables. The setting that says so covers one statement: any other UPDATE of jobs in
the same transaction is logged by the trigger as before."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.postgres.executor import Q
from jobgate.storage.postgres.store import PostgresStorage
from jobgate.storage.postgres.transport import claim_params
from jobgate.storage.records import ClaimPolicy, ClaimRequest
from jobgate.testing import eventually
from tests.storage.helpers import make_tenant, new_job

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]

EVENTS = "SELECT seq, from_state, to_state, actor, reason FROM job_events WHERE job_id = $1"


async def _events(conn: asyncpg.Connection, job_id: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in await conn.fetch(EVENTS + " ORDER BY seq", job_id)]


def _woken(heard: list[str]) -> set[str]:
    """The job ids named by the j: wake-ups heard."""
    return {i for p in heard if p.startswith("j:") for i in p[2:].split(",")}


@pytest.mark.parametrize("trigger", ["enabled", "disabled"])
async def test_claims_and_finishes_log_their_moves(pg_dsn: str, trigger: str) -> None:
    """A claim and a finish log every move they make: with the job trigger disabled too (it
    used to write these rows), and without a second row when it is enabled. Their wake-ups (sent
    by the trigger from its new rows alone) still name every job moved, and a retry wakes the
    claimers."""
    conn = await asyncpg.connect(pg_dsn)
    heard: list[str] = []
    await conn.add_listener("jobgate", lambda *args: heard.append(args[3]))
    storage = PostgresStorage(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage, "hot")
        ids = [
            job.id
            for job in await storage.job_insert_many(jobs=[new_job(tenant) for _ in range(3)])
        ]
        if trigger == "disabled":
            await conn.execute("ALTER TABLE jobs DISABLE TRIGGER jobs_after_update")
        claimed = await storage.job_claim(worker_id="w1", limit=3, lease_ttl_s=60)
        assert sorted(job.id for job in claimed) == sorted(ids)
        if trigger == "enabled":
            await eventually(lambda: _woken(heard) >= set(ids), what="the claim's wake-ups")
            heard.clear()
        leases = {job.id: Lease(job.id, job.lease_token or "") for job in claimed}
        succeeded, retried, failed = ids
        await storage.job_finish_many(
            finishes=[
                Finish(leases[succeeded], JobState.SUCCEEDED, "completed", result={"ok": 1}),
                Finish(leases[retried], JobState.QUEUED, "provider_error", retry_in_s=30.0),
                Finish(leases[failed], JobState.FAILED, "fatal_error", error={"code": "x"}),
            ]
        )
        if trigger == "enabled":
            await eventually(
                lambda: "q:" in heard and _woken(heard) >= set(ids), what="the finish's wake-ups"
            )
        submitted = (1, None, "queued", "api", "submitted")
        running = (2, "queued", "running", "w1", "claimed")
        assert await _events(conn, succeeded) == [
            submitted,
            running,
            (3, "running", "succeeded", "worker", "completed"),
        ]
        assert await _events(conn, retried) == [
            submitted,
            running,
            (3, "running", "queued", "worker", "provider_error"),
        ]
        assert await _events(conn, failed) == [
            submitted,
            running,
            (3, "running", "failed", "worker", "fatal_error"),
        ]
    finally:
        await storage.close()
        await conn.close()


async def test_the_setting_covers_one_statement(pg_dsn: str) -> None:
    """A heartbeat, a claim and a finish each clear what they told the trigger: a later UPDATE
    of jobs in the same transaction gets its event from the trigger, exactly once."""
    storage = PostgresStorage(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage, "one")
        # Two inserts: the first is the older, the one the claim takes.
        ids = [job.id for job in await storage.job_insert_many(jobs=[new_job(tenant)])]
        ids += [job.id for job in await storage.job_insert_many(jobs=[new_job(tenant)])]
    finally:
        await storage.close()
    first, second = ids
    conn = await asyncpg.connect(pg_dsn)
    move = (
        "UPDATE jobs SET state = $2, event_seq = event_seq + 1, transition_actor = 'test',"
        " transition_reason = $3 WHERE id = $1"
    )
    try:
        async with conn.transaction():
            claim = claim_params(ClaimRequest("w1", 1, 60.0, ClaimPolicy(), None, None))
            claim["shares"] = json.dumps(claim["shares"])  # jsonb: the pool's codec is not here
            query = Q["job_claim"]
            (row,) = await conn.fetch(query.positional_sql, *query.args(claim))
            assert row["id"] == first
            await conn.execute(move, second, "cancelled", "after_claim")

            query = Q["job_heartbeat"]
            leases = json.dumps([{"id": first, "token": row["lease_token"]}])
            beat = query.args({"leases": leases, "lease_ttl_s": 60.0, "now": None})
            assert len(await conn.fetch(query.positional_sql, *beat)) == 1
            await conn.execute(move, second, "failed", "after_heartbeat")

            query = Q["job_finish"]
            finish = {
                "finishes": json.dumps(
                    [
                        {
                            "id": first,
                            "token": row["lease_token"],
                            "state": "succeeded",
                            "refund_attempt": 0,
                            "lost": 0,
                            "dead_lettered": False,
                            "actor": "worker",
                            "reason": "completed",
                        }
                    ]
                ),
                "now": None,
                "expired_only": False,
            }
            assert len(await conn.fetch(query.positional_sql, *query.args(finish))) == 1
            await conn.execute(move, second, "expired", "after_finish")
            assert (
                await conn.fetchval(
                    "SELECT coalesce(current_setting('jobgate.transitions_logged', true), '')"
                )
                == ""
            )
        assert await _events(conn, first) == [
            (1, None, "queued", "api", "submitted"),
            (2, "queued", "running", "w1", "claimed"),
            (3, "running", "succeeded", "worker", "completed"),
        ]
        assert await _events(conn, second) == [
            (1, None, "queued", "api", "submitted"),
            (2, "queued", "cancelled", "test", "after_claim"),
            (3, "cancelled", "failed", "test", "after_heartbeat"),
            (4, "failed", "expired", "test", "after_finish"),
        ]
    finally:
        await conn.close()
