"""Traffic control in the claim, on both backends: scheduled jobs (`run_at`,
`delay_s`) wait in the queue until their time; concurrency keys cap a tenant's running jobs
per key, also under concurrent claims."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest

from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.storage.records import ClaimPolicy, TenantShare
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_many, make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def claim_ids(
    storage: Storage, clock: FakeClock, limit: int = 10, policy: ClaimPolicy | None = None
) -> list[str]:
    jobs = await storage.job_claim(
        worker_id="w", limit=limit, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    return [job.id for job in jobs]


# -- scheduling ------------------------------------------------------------------------------


async def test_a_delayed_job_waits_until_its_time(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    outcome = await submit_one(storage, job=new_job(tenant, delay_s=30.0), now=clock.now())
    assert outcome.job.run_at == clock.now() + timedelta(seconds=30)
    assert await claim_ids(storage, clock) == []
    clock.advance(29)
    assert await claim_ids(storage, clock) == []
    clock.advance(1)
    assert await claim_ids(storage, clock) == [outcome.job.id]


async def test_run_at_is_absolute_and_the_past_means_now(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    later = await submit_one(
        storage, job=new_job(tenant, run_at=clock.now() + timedelta(seconds=60)), now=clock.now()
    )
    past = await submit_one(
        storage, job=new_job(tenant, run_at=clock.now() - timedelta(days=1)), now=clock.now()
    )
    assert past.job.run_at == clock.now()  # never before its own submit
    assert await claim_ids(storage, clock) == [past.job.id]
    clock.advance(60)
    assert await claim_ids(storage, clock) == [later.job.id]


async def test_the_start_deadline_counts_from_run_at(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    outcome = await submit_one(
        storage, job=new_job(tenant, delay_s=100.0, start_timeout_s=10.0), now=clock.now()
    )
    assert outcome.job.expires_at == clock.now() + timedelta(seconds=110)
    clock.advance(105)  # past submit + start_timeout_s, within run_at + start_timeout_s
    assert await claim_ids(storage, clock) == [outcome.job.id]


async def test_bulk_inserts_keep_schedules_and_keys(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    jobs = await insert_many(
        storage,
        jobs=[new_job(tenant, delay_s=5.0, concurrency_key="u1"), new_job(tenant)],
        now=clock.now(),
    )
    assert jobs[0].run_at == clock.now() + timedelta(seconds=5)
    assert jobs[0].concurrency_key == "u1" and jobs[1].concurrency_key is None
    assert await claim_ids(storage, clock) == [jobs[1].id]


# -- concurrency keys ------------------------------------------------------------------------


async def test_keys_cap_running_jobs_and_other_keys_go_on(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    keyed = {}
    for key in ["alice"] * 4 + ["bob"] * 2 + [None] * 2:
        job = (
            await submit_one(storage, job=new_job(tenant, concurrency_key=key), now=clock.now())
        ).job
        keyed[job.id] = key
    policy = ClaimPolicy(tenants={tenant.id: TenantShare(max_running_per_key=2)})
    first = Counter(keyed[i] for i in await claim_ids(storage, clock, 3, policy))
    # alice's oldest jobs come first, but she may hold only two: this claim takes fewer than
    # its limit (the worker claims again at once while claims yield jobs).
    assert first == Counter({"alice": 2})
    second = Counter(keyed[i] for i in await claim_ids(storage, clock, 10, policy))
    # alice's queued jobs are no longer even scanned: bob and the unkeyed jobs go on.
    assert second == Counter({"bob": 2, None: 2})
    assert await claim_ids(storage, clock, 10, policy) == []


async def test_a_finished_job_frees_its_keys_slot(storage: Storage, clock: FakeClock) -> None:

    tenant = await make_tenant(storage)
    for _ in range(3):
        await submit_one(storage, job=new_job(tenant, concurrency_key="u"), now=clock.now())
    policy = ClaimPolicy(default=TenantShare(max_running_per_key=1))
    (running,) = await storage.job_claim(
        worker_id="w", limit=10, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    assert await claim_ids(storage, clock, 10, policy) == []
    assert running.lease_token is not None
    await storage.job_finish_many(
        finishes=[
            Finish(
                lease=Lease(running.id, running.lease_token),
                state=JobState.SUCCEEDED,
                reason="succeeded",
                result={},
            )
        ],
        now=clock.now(),
    )
    assert len(await claim_ids(storage, clock, 10, policy)) == 1


async def test_without_a_per_key_cap_keys_do_not_limit(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for _ in range(5):
        await submit_one(storage, job=new_job(tenant, concurrency_key="u"), now=clock.now())
    assert len(await claim_ids(storage, clock, 10)) == 5


async def test_concurrent_claims_never_pass_a_keys_cap(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for i in range(40):
        key = f"user{i % 2}"
        await submit_one(storage, job=new_job(tenant, concurrency_key=key), now=clock.now())
    policy = ClaimPolicy(tenants={tenant.id: TenantShare(max_running_per_key=3)})
    claims = await asyncio.gather(
        *(
            storage.job_claim(
                worker_id=f"w{n}", limit=4, lease_ttl_s=60, policy=policy, now=clock.now()
            )
            for n in range(8)
        )
    )
    held = Counter(job.concurrency_key for jobs in claims for job in jobs)
    assert held == Counter({"user0": 3, "user1": 3})


async def test_two_processes_claiming_never_pass_a_keys_cap(
    storage: Storage, clock: FakeClock
) -> None:
    """Two storages on one database, as two worker processes have."""
    from jobgate.storage.postgres.store import is_postgres, postgres_store
    from jobgate.storage.sqlite.store import is_sqlite, sqlite_store

    other: Storage
    if is_postgres(storage):
        other = postgres_store(storage.engine.dsn, pool_size=2)
    else:
        assert is_sqlite(storage)
        other = sqlite_store(storage.engine.path, clock=clock)
    await other.open()
    try:
        tenant = await make_tenant(storage)
        for _ in range(20):
            await submit_one(storage, job=new_job(tenant, concurrency_key="u"), now=clock.now())
        policy = ClaimPolicy(default=TenantShare(max_running_per_key=2))
        claims = await asyncio.gather(
            *(
                store.job_claim(
                    worker_id=f"w{n}", limit=5, lease_ttl_s=60, policy=policy, now=clock.now()
                )
                for n in range(6)
                for store in (storage, other)
            )
        )
        assert sum(len(jobs) for jobs in claims) == 2
    finally:
        await other.close()


async def _to_background(storage: Storage, clock: FakeClock, job: Job) -> None:
    """The provider accepted the job in background mode: it runs there, without a lease."""
    assert job.lease_token is not None
    lease = Lease(job.id, job.lease_token)
    await storage.job_provider_submitting(lease=lease, now=clock.now())
    accepted = await storage.job_background_accept(
        lease=lease,
        provider_job_id=f"resp_{job.id}",
        provider_status="queued",
        reconcile_in_s=30,
        now=clock.now(),
    )
    assert accepted.state is JobState.RUNNING and accepted.lease_token is None


async def test_a_keys_cap_counts_jobs_running_in_background_mode(
    storage: Storage, clock: FakeClock
) -> None:
    """A job at its provider in background mode holds no lease but still runs for its key: the
    cap counts it, in a claim from the table and in a claim by id."""
    tenant = await make_tenant(storage)
    ids = [
        (
            await submit_one(storage, job=new_job(tenant, concurrency_key="u"), now=clock.now())
        ).job.id
        for _ in range(3)
    ]
    policy = ClaimPolicy(default=TenantShare(max_running_per_key=1))
    (first,) = await storage.job_claim(
        worker_id="w", limit=10, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    await _to_background(storage, clock, first)
    assert await claim_ids(storage, clock, 10, policy) == []
    by_id = await storage.job_claim_by_id(
        worker_id="w", job_ids=ids, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    assert by_id.claimed == [] and sorted(by_id.deferred) == sorted(ids[1:])
