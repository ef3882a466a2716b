"""Races and edge cases in the storage contract, on both backends: a provider's
retry of a job whose cancel was requested, redrive (old cancel request, old start deadline,
purged input), a claim past the start deadline, and (PostgreSQL) a cancel whose transaction
began before a reconciler's claim."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import pytest

from jobgate import errors
from jobgate.domain.job import CancelOutcome, Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage import sql
from jobgate.storage.postgres.store import is_postgres
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Settlement, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import (
    finish_one,
    make_tenant,
    new_job,
    submit_one,
    wait_until_blocked_by,
)

PG = sql.load("jobgate.storage.postgres")


@pytest.fixture
async def tenant(storage: Storage) -> Tenant:
    return await make_tenant(storage)


async def _claim(storage: Storage, clock: FakeClock) -> Job:
    [job] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    return job


async def _lease(job: Job) -> Lease:
    assert job.lease_token is not None
    return Lease(job.id, job.lease_token)


async def _at_provider(storage: Storage, clock: FakeClock, tenant: Tenant, **fields: object) -> Job:
    """A job running at its provider in background mode (no worker lease)."""
    await submit_one(storage, job=new_job(tenant, **fields), now=clock.now())
    claimed = await _claim(storage, clock)
    return await storage.job_background_accept(
        lease=await _lease(claimed),
        provider_job_id="resp_1",
        provider_status="in_progress",
        reconcile_in_s=30,
        now=clock.now(),
    )


async def _dead_letter(storage: Storage, clock: FakeClock, job: Job) -> Job:
    return await finish_one(
        storage,
        finish=Finish(
            lease=await _lease(job),
            state=JobState.FAILED,
            reason="attempts_exhausted",
            actor="w",
            dead_lettered=True,
            error={"code": "server_error", "message": "boom", "type": "server_error"},
        ),
        now=clock.now(),
    )


# -- 1. settle follows the same rule as finish -------------------------------------------------


@pytest.mark.parametrize("count_attempt", [True, False])  # retryable error / rate limit
async def test_a_provider_retry_after_a_cancel_request_is_the_cancellation(
    storage: Storage, clock: FakeClock, tenant: Tenant, count_attempt: bool
) -> None:
    job = await _at_provider(storage, clock, tenant)
    clock.advance(1)
    await storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api", now=clock.now())
    clock.advance(1)
    settled = await storage.job_settle(
        settlement=Settlement(
            job_id=job.id,
            provider_job_id="resp_1",
            state=JobState.QUEUED,  # as decided from the job claimed before the cancel
            reason="retryable_error",
            actor="reconciler",
            provider_status="failed",
            retry_in_s=0.0,
            count_attempt=count_attempt,
        ),
        now=clock.now(),
    )
    assert settled is not None and settled.state is JobState.CANCELLED
    assert settled.cancel_outcome == CancelOutcome.INTERRUPTED
    assert settled.completed_at == clock.now()
    assert settled.provider_job_id == "resp_1"  # the provider's job is not forgotten
    assert settled.provider_generation == job.provider_generation
    last = (await storage.job_events(job_id=job.id))[-1]
    assert (last.from_state, last.to_state, last.reason) == (
        JobState.RUNNING,
        JobState.CANCELLED,
        "cancel_requested",
    )
    assert await storage.job_claim(worker_id="w", limit=5, lease_ttl_s=60, now=clock.now()) == []


async def test_a_provider_retry_without_a_cancel_request_still_requeues(
    storage: Storage, clock: FakeClock, tenant: Tenant
) -> None:
    job = await _at_provider(storage, clock, tenant)
    settled = await storage.job_settle(
        settlement=Settlement(
            job_id=job.id,
            provider_job_id="resp_1",
            state=JobState.QUEUED,
            reason="retryable_error",
            actor="reconciler",
            retry_in_s=5.0,
        ),
        now=clock.now(),
    )
    assert settled is not None and settled.state is JobState.QUEUED
    assert settled.provider_job_id is None and settled.completed_at is None
    assert settled.provider_generation == job.provider_generation + 1
    assert settled.run_at == clock.now() + timedelta(seconds=5)


# -- 5, 6, 8. redrive --------------------------------------------------------------------------


async def test_redrive_forgets_the_old_cancel_request(
    storage: Storage, clock: FakeClock, tenant: Tenant
) -> None:
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    job = await _claim(storage, clock)
    await storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api", now=clock.now())
    dead = await _dead_letter(storage, clock, job)  # the failure committed first: it stands
    assert dead.state is JobState.FAILED and dead.cancel_requested_at is not None
    redriven = await storage.job_redrive(
        job_id=job.id, tenant_id=tenant.id, actor="operator", now=clock.now()
    )
    assert redriven is not None and redriven.state is JobState.QUEUED
    assert (redriven.cancel_requested_at, redriven.cancel_outcome) == (None, None)
    again = await _claim(storage, clock)
    [beat] = await storage.job_heartbeat(
        leases=[await _lease(again)], lease_ttl_s=60, now=clock.now()
    )
    assert not beat.cancel_requested  # the new series does not cancel itself


async def test_redrive_gives_a_fresh_start_deadline(
    storage: Storage, clock: FakeClock, tenant: Tenant
) -> None:
    await submit_one(storage, job=new_job(tenant, start_timeout_s=100), now=clock.now())
    job = await _claim(storage, clock)
    await _dead_letter(storage, clock, job)
    clock.advance(1000)  # long past the first start deadline
    redriven = await storage.job_redrive(
        job_id=job.id, tenant_id=tenant.id, actor="operator", now=clock.now()
    )
    assert redriven is not None and redriven.expires_at == clock.now() + timedelta(seconds=100)
    clock.advance(50)
    assert await storage.job_expire_due(limit=10, now=clock.now()) == []
    again = await _claim(storage, clock)
    assert again.id == job.id
    await _dead_letter(storage, clock, again)
    clock.advance(1000)
    twice = await storage.job_redrive(
        job_id=job.id, tenant_id=tenant.id, actor="operator", now=clock.now()
    )  # the submit's 100 s again, not the time since it was submitted
    assert twice is not None and twice.expires_at == clock.now() + timedelta(seconds=100)


async def test_a_job_past_its_start_deadline_cannot_be_claimed(
    storage: Storage, clock: FakeClock, tenant: Tenant
) -> None:
    late = new_job(tenant, start_timeout_s=10)
    await submit_one(storage, job=late, now=clock.now())
    clock.advance(5)
    await submit_one(storage, job=new_job(tenant, start_timeout_s=100), now=clock.now())
    clock.advance(6)  # the first is past its start deadline; no reaper pass yet
    claimed = await storage.job_claim(worker_id="w", limit=5, lease_ttl_s=60, now=clock.now())
    assert late.id not in [j.id for j in claimed] and len(claimed) == 1
    assert await storage.job_expire_due(limit=10, now=clock.now()) == [late.id]


async def test_redriving_a_purged_job_is_refused(
    storage: Storage, clock: FakeClock, tenant: Tenant
) -> None:
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    job = await _dead_letter(storage, clock, await _claim(storage, clock))
    await storage.job_purge(job_id=job.id, tenant_id=tenant.id, now=clock.now())
    with pytest.raises(errors.Conflict) as refused:
        await storage.job_redrive(
            job_id=job.id, tenant_id=tenant.id, actor="operator", now=clock.now()
        )
    assert refused.value.code == "job_purged"
    still = await storage.job_get(job_id=job.id)
    assert still is not None and still.state is JobState.FAILED and still.dead_lettered


# -- argued from the SQL: a cancel that began before a reconciler's claim ----------------------


async def test_a_cancel_begun_before_a_reconcile_claim_is_still_due_at_once(
    storage: Storage, clock: FakeClock, tenant: Tenant
) -> None:
    if not is_postgres(storage):
        pytest.skip("SQLite has one writer: a cancel cannot straddle a claim")
    job = await _at_provider(storage, clock, tenant)
    await storage.job_reconcile_refresh()  # due now, by the database's clock
    canceller = await asyncpg.connect(storage.engine.listen_dsn)  # a session of its own
    try:
        tx = canceller.transaction()
        await tx.start()
        await canceller.fetchval("SELECT now()")  # the cancel's transaction has begun
        claimed = await storage.job_reconcile_claim(limit=5, lease_s=120)  # (now() later)
        assert [c.job.id for c in claimed] == [job.id]
        query = PG["job_cancel"]
        params = {"id": job.id, "tenant_id": tenant.id, "actor": "api", "now": None}
        await canceller.fetch(query.positional_sql, *query.args(params))
        await tx.commit()
    finally:
        await canceller.close()
    # The claim's check did not see the cancel; the cancel must make the job due again now.
    again = await storage.job_reconcile_claim(limit=5, lease_s=120)
    assert [c.job.id for c in again] == [job.id]


async def test_a_provider_event_that_overlaps_the_accept_makes_the_job_due(
    storage: Storage, clock: FakeClock, tenant: Tenant
) -> None:
    """READ COMMITTED: the accept's statement began before the event committed (its EXISTS
    misses the event) and the event's UPDATE ran before the accept committed (it misses the
    job). The re-check after the later commit must still make the job due at once."""
    if not is_postgres(storage):
        pytest.skip("SQLite has one writer: the two cannot overlap")
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    claimed = await _claim(storage, clock)
    blocker = await asyncpg.connect(storage.engine.listen_dsn)  # a session of its own
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", claimed.id)
        accept = asyncio.create_task(
            storage.job_background_accept(
                lease=await _lease(claimed),
                provider_job_id="resp_9",
                provider_status="in_progress",
                reconcile_in_s=3600,
            )
        )
        await wait_until_blocked_by(blocker, accept)  # the accept took its snapshot, waits
        outcome = await storage.provider_event_record(
            provider=claimed.provider,
            event_id="evt_1",
            event_type="response.completed",
            provider_job_id="resp_9",
        )
        assert not outcome.duplicate and outcome.job is None  # the job does not hold it yet
        await tx.rollback()
        await accept
    finally:
        await blocker.close()
    due = await storage.job_reconcile_claim(limit=5, lease_s=120)
    assert [d.job.id for d in due] == [claimed.id]
