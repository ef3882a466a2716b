"""job_insert of one chunk without keys (batched enqueue), on SQLite and PostgreSQL alike: all
or nothing, each job with its first event, claimable like any other, bounded by the queue
limits."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobgate import errors
from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import QueueLimit
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_many, make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def test_a_batch_is_stored_in_order_with_first_events(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    jobs = [new_job(tenant, priority=i % 3, metadata={"n": i}) for i in range(25)]
    jobs[3] = new_job(tenant, webhook={"url": "https://example.com/h", "event_types": []})
    jobs[4] = new_job(tenant, start_timeout_s=30.0, execution_timeout_s=5.0)
    stored = await insert_many(storage, jobs=jobs, now=clock.now())
    assert [job.id for job in stored] == [job.id for job in jobs]
    assert all(job.state is JobState.QUEUED and job.attempt == 0 for job in stored)
    assert stored[0].metadata == {"n": 0} and stored[3].webhook == jobs[3].webhook
    assert stored[4].expires_at is not None and stored[4].execution_timeout_s == 5.0
    assert stored[4].expires_at == stored[4].created_at + timedelta(seconds=30)
    for job in stored:
        (event,) = await storage.job_events(job_id=job.id)
        assert (event.from_state, event.to_state, event.seq) == (None, JobState.QUEUED, 1)
    claimed = await storage.job_claim(worker_id="w1", limit=100, lease_ttl_s=60, now=clock.now())
    assert {job.id for job in claimed} == {job.id for job in jobs}


async def test_an_empty_batch_stores_nothing(storage: Storage) -> None:
    assert await insert_many(storage, jobs=[]) == []


async def test_a_duplicate_id_stores_none_of_the_batch(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    first = new_job(tenant)
    await submit_one(storage, job=first, now=clock.now())
    batch = [new_job(tenant), first, new_job(tenant)]
    with pytest.raises(errors.StorageError):
        await insert_many(storage, jobs=batch, now=clock.now())
    for job in (batch[0], batch[2]):
        assert await storage.job_get(job_id=job.id) is None


async def test_queue_bounds_count_the_whole_batch(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    other = await make_tenant(storage, "other")
    await insert_many(storage, jobs=[new_job(tenant) for _ in range(3)], now=clock.now())
    await submit_one(storage, job=new_job(other), now=clock.now())
    too_many = [new_job(tenant) for _ in range(3)]
    with pytest.raises(errors.QueueFull) as tenant_full:
        await insert_many(
            storage, jobs=too_many, queue_limit=QueueLimit(tenant_max=5), now=clock.now()
        )
    assert tenant_full.value.limit == "max_queued"
    with pytest.raises(errors.QueueFull) as total_full:
        await insert_many(
            storage,
            jobs=too_many[:2],
            queue_limit=QueueLimit(tenant_max=5, total_max=5),
            now=clock.now(),
        )
    assert total_full.value.limit == "max_queued_total"
    for job in too_many:
        assert await storage.job_get(job_id=job.id) is None
    fits = await insert_many(
        storage,
        jobs=too_many[:2],
        queue_limit=QueueLimit(tenant_max=5, total_max=6),
        now=clock.now(),
    )
    assert len(fits) == 2
