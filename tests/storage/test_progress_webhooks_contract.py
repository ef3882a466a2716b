"""Progress webhooks in the Storage contract, on both stores: `job.progress` rows go only to the
enabled endpoints that list it, one row per (job, endpoint) that a newer progress supersedes
while it is unsent, re-armed after a send no sooner than the endpoint's interval; and an
endpoint's later event for the job waits while a progress to it is in flight."""

from __future__ import annotations

from datetime import datetime

import pytest

from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Delivery, DeliveryOutcome, EndpointChanges, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one
from tests.storage.webhook_helpers import make_endpoint

pytestmark = pytest.mark.asyncio

PROGRESS = "job.progress"
SENT = DeliveryOutcome(state="succeeded", attempted=True, status_code=200, latency_ms=3)
STREAM = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def running_job(storage: Storage, clock: FakeClock, tenant: Tenant) -> Lease:
    job = (await submit_one(storage, job=new_job(tenant, request=STREAM), now=clock.now())).job
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=600, now=clock.now())
    assert claimed.id == job.id
    return Lease(job.id, claimed.lease_token or "")


async def claim(storage: Storage, now: datetime) -> list[Delivery]:
    return await storage.delivery_claim_due(limit=10, lease_s=30, now=now)


async def test_only_enabled_endpoints_that_list_progress_get_it(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    other = await make_tenant(storage, "other")
    listed = await make_endpoint(storage, acme, clock, event_types=(PROGRESS, "job.succeeded"))
    await make_endpoint(storage, acme, clock)  # no filter: terminal events only, as before
    await make_endpoint(storage, acme, clock, event_types=("job.running",))
    await make_endpoint(storage, acme, clock, event_types=(PROGRESS,), disabled=True)
    await make_endpoint(storage, other, clock, event_types=(PROGRESS,))
    lease = await running_job(storage, clock, acme)

    assert await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now()) == 1
    rows = await storage.outbox_for_job(job_id=lease.job_id)
    progress = [(r.event_type, r.target) for r in rows if r.event_type == PROGRESS]
    assert progress == [(PROGRESS, listed.id)]


async def test_a_job_that_is_not_running_arms_nothing(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage)
    await make_endpoint(storage, acme, clock, event_types=(PROGRESS,))
    job = (await submit_one(storage, job=new_job(acme, request=STREAM), now=clock.now())).job
    assert await storage.outbox_progress_arm(job_id=job.id, now=clock.now()) == 0
    assert await storage.outbox_progress_arm(job_id="job_missing", now=clock.now()) == 0
    assert await storage.outbox_for_job(job_id=job.id) == []


async def test_an_unsent_progress_is_superseded_and_a_sent_one_rearmed_after_the_interval(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    endpoint = await make_endpoint(storage, acme, clock, event_types=(PROGRESS,))
    await storage.webhook_endpoint_update(
        endpoint_id=endpoint.id, tenant_id=acme.id, changes=EndpointChanges(progress_interval_s=10)
    )
    lease = await running_job(storage, clock, acme)
    start = clock.now()
    assert await storage.outbox_progress_arm(job_id=lease.job_id, now=start) == 1
    # Newer progress while the row is unsent: still one row, the one that will be sent.
    assert await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.advance(1)) == 0
    [first] = await claim(storage, clock.now())
    assert first.entry.event_type == PROGRESS
    assert await storage.delivery_record(delivery=first, outcome=SENT, now=clock.now())

    assert await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.advance(1)) == 1
    [row] = [r for r in await storage.outbox_for_job(job_id=lease.job_id)]
    assert row.id == first.entry.id and row.state == "pending" and row.attempts == 0
    assert row.event_id != first.entry.event_id  # a new event: receivers dedupe on the id
    assert await claim(storage, clock.advance(8.5)) == []  # 9.5 s after the send
    [second] = await claim(storage, clock.advance(0.5))  # 10 s after it
    assert second.entry.event_id == row.event_id


async def test_a_later_event_waits_for_the_progress_in_flight(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    endpoint = await make_endpoint(storage, acme, clock, event_types=(PROGRESS, "job.succeeded"))
    lease = await running_job(storage, clock, acme)
    await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now())
    [in_flight] = await claim(storage, clock.now())
    await finish_one(
        storage,
        finish=Finish(lease=lease, state=JobState.SUCCEEDED, reason="t", result={"ok": True}),
        now=clock.now(),
    )
    # The job ended; its terminal event is due but held while the progress is being sent.
    assert await claim(storage, clock.advance(1)) == []
    assert await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now()) == 0
    assert await storage.delivery_record(delivery=in_flight, outcome=SENT, now=clock.now())
    [terminal] = await claim(storage, clock.now())
    assert (terminal.entry.event_type, terminal.entry.endpoint_id) == ("job.succeeded", endpoint.id)


async def test_the_hold_ends_with_the_progress_lease(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage)
    await make_endpoint(storage, acme, clock, event_types=(PROGRESS, "job.failed"))
    lease = await running_job(storage, clock, acme)
    await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now())
    [_lost] = await claim(storage, clock.now())  # a dispatcher that dies mid-send
    await finish_one(
        storage, finish=Finish(lease=lease, state=JobState.FAILED, reason="t"), now=clock.now()
    )
    types = sorted(d.entry.event_type for d in await claim(storage, clock.advance(31)))
    assert types == ["job.failed", PROGRESS]


async def test_an_endpoint_keeps_its_progress_interval(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage)
    endpoint = await make_endpoint(storage, acme, clock, progress_interval_s=2.5)
    assert endpoint.progress_interval_s == 2.5
    assert (await make_endpoint(storage, acme, clock)).progress_interval_s == 5.0
    changed = await storage.webhook_endpoint_update(
        endpoint_id=endpoint.id, tenant_id=acme.id, changes=EndpointChanges(description="x")
    )
    assert changed is not None and changed.progress_interval_s == 2.5
    changed = await storage.webhook_endpoint_update(
        endpoint_id=endpoint.id, tenant_id=acme.id, changes=EndpointChanges(progress_interval_s=60)
    )
    assert changed is not None and changed.progress_interval_s == 60


async def test_a_dropped_progress_is_not_an_endpoint_failure_in_its_health(
    storage: Storage, clock: FakeClock
) -> None:
    """Progress is best effort (sent once, dropped when superseded or refused): the console's
    endpoint health counts the deliveries that are retried, so a dropped progress is neither a
    failed delivery nor the endpoint's last error."""
    acme = await make_tenant(storage)
    endpoint = await make_endpoint(storage, acme, clock, event_types=(PROGRESS,))
    lease = await running_job(storage, clock, acme)
    assert await storage.outbox_progress_arm(job_id=lease.job_id, now=clock.now()) == 1
    [delivery] = await claim(storage, clock.now())
    dropped = DeliveryOutcome(
        state="failed", attempted=False, status_code=None, latency_ms=0,
        error="superseded: the job is no longer running",
    )  # fmt: skip
    assert await storage.delivery_record(delivery=delivery, outcome=dropped, now=clock.now())
    [health] = await storage.admin_endpoint_health(min_attempts=3)
    assert health.endpoint_id == endpoint.id
    assert (health.failing, health.pending, health.failed, health.last_error) == (
        False, 0, 0, None,
    )  # fmt: skip
