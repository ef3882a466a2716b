"""Batch progress webhooks in the Storage contract, on both stores: `batch.progress` rows go
only to the enabled endpoints of the batch's tenant that list it, and only while the batch is in
progress; one row per (batch, endpoint) that a newer progress supersedes while it is unsent,
re-armed after a send no sooner than the endpoint's interval; the batch's terminal event to an
endpoint waits while a progress to it is in flight; a dropped one is no endpoint failure."""

from __future__ import annotations

from datetime import datetime

import pytest

from jobgate.storage.protocol import Storage
from jobgate.storage.records import Delivery, DeliveryOutcome, EndpointChanges, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant
from tests.storage.test_batches_contract import stored_file
from tests.storage.webhook_helpers import make_endpoint

pytestmark = pytest.mark.asyncio

PROGRESS = "batch.progress"
SENT = DeliveryOutcome(state="succeeded", attempted=True, status_code=200, latency_ms=3)


async def batch_in(storage: Storage, clock: FakeClock, tenant: Tenant, *, start: bool) -> str:
    await stored_file(storage, tenant.id, f"file_{tenant.id}")
    batch = await storage.batch_create(
        batch={
            "id": f"batch_{tenant.id}",
            "tenant_id": tenant.id,
            "endpoint": "/v1/chat/completions",
            "input_file_id": f"file_{tenant.id}",
            "completion_window": "24h",
            "window_s": 86400,
            "metadata": None,
            "priority": 0,
        },
        now=clock.now(),
    )
    assert batch is not None
    if start:
        moved = await storage.batch_update(
            batch_id=batch.id, from_statuses=["validating"], status="in_progress"
        )
        assert moved is not None
    return batch.id


async def claim(storage: Storage, now: datetime) -> list[Delivery]:
    return await storage.delivery_claim_due(limit=10, lease_s=30, now=now)


async def test_only_enabled_endpoints_that_list_it_get_it_while_in_progress(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    other = await make_tenant(storage, "other")
    listed = await make_endpoint(storage, acme, clock, event_types=(PROGRESS, "batch.completed"))
    await make_endpoint(storage, acme, clock)  # no filter: terminal events only
    await make_endpoint(storage, acme, clock, event_types=("job.progress",))
    await make_endpoint(storage, acme, clock, event_types=(PROGRESS,), disabled=True)
    await make_endpoint(storage, other, clock, event_types=(PROGRESS,))
    waiting = await batch_in(storage, clock, other, start=False)
    assert await storage.outbox_batch_progress_arm(batch_id=waiting, now=clock.now()) == 0
    assert await storage.outbox_batch_progress_arm(batch_id="batch_missing") == 0

    batch_id = await batch_in(storage, clock, acme, start=True)
    assert await storage.outbox_batch_progress_arm(batch_id=batch_id, now=clock.now()) == 1
    rows = await storage.outbox_for_job(job_id=batch_id)
    assert [(r.event_type, r.target, r.job_status) for r in rows] == [
        (PROGRESS, listed.id, "in_progress")
    ]


async def test_an_unsent_progress_is_superseded_and_a_sent_one_rearmed_after_the_interval(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    endpoint = await make_endpoint(storage, acme, clock, event_types=(PROGRESS,))
    await storage.webhook_endpoint_update(
        endpoint_id=endpoint.id, tenant_id=acme.id, changes=EndpointChanges(progress_interval_s=10)
    )
    batch_id = await batch_in(storage, clock, acme, start=True)
    assert await storage.outbox_batch_progress_arm(batch_id=batch_id, now=clock.now()) == 1
    assert await storage.outbox_batch_progress_arm(batch_id=batch_id, now=clock.advance(1)) == 0
    [first] = await claim(storage, clock.now())
    assert first.entry.event_type == PROGRESS
    assert await storage.delivery_record(delivery=first, outcome=SENT, now=clock.now())

    assert await storage.outbox_batch_progress_arm(batch_id=batch_id, now=clock.advance(1)) == 1
    [row] = await storage.outbox_for_job(job_id=batch_id)
    assert row.id == first.entry.id and row.state == "pending" and row.attempts == 0
    assert row.event_id != first.entry.event_id
    assert await claim(storage, clock.advance(8.5)) == []  # 9.5 s after the send
    [second] = await claim(storage, clock.advance(0.5))
    assert second.entry.event_id == row.event_id


async def test_the_batch_end_waits_for_the_progress_in_flight(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    endpoint = await make_endpoint(storage, acme, clock, event_types=(PROGRESS, "batch.completed"))
    batch_id = await batch_in(storage, clock, acme, start=True)
    await storage.outbox_batch_progress_arm(batch_id=batch_id, now=clock.now())
    [in_flight] = await claim(storage, clock.now())
    await storage.batch_event_insert(
        batch_id=batch_id,
        tenant_id=acme.id,
        event_type="batch.completed",
        status="completed",
        now=clock.now(),
    )
    assert await claim(storage, clock.advance(1)) == []  # held behind the progress
    assert await storage.delivery_record(delivery=in_flight, outcome=SENT, now=clock.now())
    [end] = await claim(storage, clock.now())
    assert (end.entry.event_type, end.entry.endpoint_id) == ("batch.completed", endpoint.id)


async def test_a_dropped_progress_is_not_an_endpoint_failure_in_its_health(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    endpoint = await make_endpoint(storage, acme, clock, event_types=(PROGRESS,))
    batch_id = await batch_in(storage, clock, acme, start=True)
    assert await storage.outbox_batch_progress_arm(batch_id=batch_id, now=clock.now()) == 1
    [delivery] = await claim(storage, clock.now())
    dropped = DeliveryOutcome(
        state="failed", attempted=True, status_code=500, latency_ms=2, error="HTTP 500"
    )
    assert await storage.delivery_record(delivery=delivery, outcome=dropped, now=clock.now())
    [health] = await storage.admin_endpoint_health(min_attempts=1)
    assert health.endpoint_id == endpoint.id
    assert (health.failing, health.pending, health.failed, health.last_status_code) == (
        False,
        0,
        0,
        None,
    )
