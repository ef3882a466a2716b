"""job_insert_bulk (native bulk with per-item keys), on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobgate import errors
from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import BulkItem, IdempotencyClaim, QueueLimit, SubmitOutcome
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job

pytestmark = pytest.mark.asyncio


def claim(key: str, body_hash: str = "h") -> IdempotencyClaim:
    return IdempotencyClaim(route="r", key=key, body_hash=body_hash, status_code=202, ttl_s=3600)


async def test_keyed_and_keyless_items_in_order_with_replays(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    items = [
        BulkItem(new_job(tenant, metadata={"n": 0}), claim("a")),
        BulkItem(new_job(tenant, metadata={"n": 1})),
        BulkItem(new_job(tenant, metadata={"n": 2}), claim("a")),  # same key, same body
        BulkItem(new_job(tenant, metadata={"n": 3}), claim("a", "other")),  # another body
        BulkItem(new_job(tenant, metadata={"n": 4}), claim("b")),
    ]
    results = await storage.job_insert_bulk(items=items, now=clock.now())
    assert isinstance(results[0], SubmitOutcome) and not results[0].replayed
    assert isinstance(results[1], SubmitOutcome) and results[1].job.metadata == {"n": 1}
    assert isinstance(results[2], SubmitOutcome) and results[2].replayed
    assert results[2].job.id == results[0].job.id
    assert isinstance(results[3], errors.IdempotencyKeyReused)
    assert isinstance(results[4], SubmitOutcome) and results[4].job.metadata == {"n": 4}
    assert await storage.queued_count(tenant_id=tenant.id) == 3
    # The whole call again: every keyed item replays, nothing is doubled.
    again = await storage.job_insert_bulk(items=[items[0], items[4]], now=clock.now())
    assert all(isinstance(r, SubmitOutcome) and r.replayed for r in again)
    assert await storage.queued_count(tenant_id=tenant.id) == 3
    (event,) = await storage.job_events(job_id=results[4].job.id)
    assert event.to_state is JobState.QUEUED


async def test_a_bound_passed_stores_nothing(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await storage.job_insert(job=new_job(tenant), now=clock.now())
    items = [BulkItem(new_job(tenant), claim(f"k{i}")) for i in range(3)]
    with pytest.raises(errors.QueueFull):
        await storage.job_insert_bulk(
            items=items, queue_limit=QueueLimit(tenant_max=3), now=clock.now()
        )
    assert await storage.queued_count(tenant_id=tenant.id) == 1
    # The keys were not bound either: the same call under a looser bound stores all three.
    results = await storage.job_insert_bulk(
        items=items, queue_limit=QueueLimit(tenant_max=4), now=clock.now()
    )
    assert all(isinstance(r, SubmitOutcome) and not r.replayed for r in results)


async def test_a_keyed_item_keeps_its_run_at(storage: Storage, clock: FakeClock) -> None:
    """A keyed item's times travel as job_insert's do (PostgreSQL once passed run_at as text)."""
    tenant = await make_tenant(storage)
    later = clock.now() + timedelta(hours=1)
    items = [BulkItem(new_job(tenant, run_at=later), claim("t")), BulkItem(new_job(tenant))]
    keyed, keyless = await storage.job_insert_bulk(items=items, now=clock.now())
    assert isinstance(keyed, SubmitOutcome) and keyed.job.run_at == later
    assert isinstance(keyless, SubmitOutcome) and keyless.job.run_at == clock.now()


async def test_an_empty_call_stores_nothing(storage: Storage) -> None:
    assert await storage.job_insert_bulk(items=[]) == []
