"""The webhook part of the Storage contract, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from jobgate import ids
from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import (
    ENDPOINT_ACTIVE,
    ENDPOINT_DISABLED,
    DeliveryOutcome,
    EndpointChanges,
)
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant
from tests.storage.webhook_helpers import finish_job, make_endpoint

pytestmark = pytest.mark.asyncio

SUCCEEDED = DeliveryOutcome(state="succeeded", attempted=True, status_code=200, latency_ms=12)


def retry(in_s: float, status: int = 500) -> DeliveryOutcome:
    return DeliveryOutcome(
        state="pending",
        attempted=True,
        status_code=status,
        latency_ms=7,
        error=f"HTTP {status}",
        retry_in_s=in_s,
    )


# -- endpoints ------------------------------------------------------------------------------


async def test_endpoint_create_get_list(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    first = await make_endpoint(
        storage,
        acme,
        clock,
        description="prod",
        event_types=("job.succeeded",),
        include_result=True,
    )
    assert first.event_types == ("job.succeeded",) and first.include_result
    assert not first.disabled and first.previous_secret is None
    assert first.created_at == clock.now()
    assert await storage.webhook_endpoint_get(endpoint_id=first.id, tenant_id=acme.id) == first
    assert await storage.webhook_endpoint_get(endpoint_id=first.id, tenant_id=beta.id) is None
    assert await storage.webhook_endpoint_get(endpoint_id=first.id) == first
    clock.advance(1)
    second = await make_endpoint(storage, acme, clock)
    clock.advance(1)
    third = await make_endpoint(storage, acme, clock)
    await make_endpoint(storage, beta, clock)
    page = await storage.webhook_endpoint_list(tenant_id=acme.id, limit=2)
    assert [e.id for e in page] == [first.id, second.id]
    rest = await storage.webhook_endpoint_list(tenant_id=acme.id, after=second.id, limit=2)
    assert [e.id for e in rest] == [third.id]
    assert await storage.webhook_endpoint_list(tenant_id=beta.id, after=first.id) == []


async def test_endpoint_update_is_partial(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock, description="a")
    changed = await storage.webhook_endpoint_update(
        endpoint_id=endpoint.id,
        tenant_id=tenant.id,
        changes=EndpointChanges(event_types=("job.running",), disabled=True),
        now=clock.advance(5),
    )
    assert changed is not None
    assert changed.event_types == ("job.running",) and changed.description == "a"
    assert changed.disabled and changed.disabled_reason == "disabled by request"
    assert changed.url == endpoint.url and changed.secret == endpoint.secret
    assert changed.updated_at == clock.now()
    enabled = await storage.webhook_endpoint_update(
        endpoint_id=endpoint.id,
        tenant_id=tenant.id,
        changes=EndpointChanges(disabled=False, url="https://new.example/x", include_result=True),
    )
    assert enabled is not None and not enabled.disabled and enabled.disabled_reason is None
    assert enabled.url == "https://new.example/x" and enabled.include_result
    assert enabled.event_types == ("job.running",)
    assert (
        await storage.webhook_endpoint_update(
            endpoint_id=endpoint.id, tenant_id="ten_other", changes=EndpointChanges(disabled=True)
        )
        is None
    )


async def test_rotation_keeps_the_old_secret_for_the_grace_period(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock)
    rotated = await storage.webhook_endpoint_rotate_secret(
        endpoint_id=endpoint.id,
        tenant_id=tenant.id,
        secret="whsec_bmV3",
        grace_s=3600,
        now=clock.now(),
    )
    assert rotated is not None and rotated.secret == "whsec_bmV3"
    assert rotated.previous_secret == endpoint.secret
    assert rotated.previous_secret_expires_at == clock.now() + timedelta(seconds=3600)
    again = await storage.webhook_endpoint_rotate_secret(
        endpoint_id=endpoint.id,
        tenant_id=tenant.id,
        secret="whsec_bmV3ZXI=",
        grace_s=0,
        now=clock.now(),
    )
    assert again is not None and again.previous_secret is None
    assert again.previous_secret_expires_at is None
    assert (
        await storage.webhook_endpoint_rotate_secret(
            endpoint_id=endpoint.id, tenant_id="ten_x", secret="whsec_eA==", grace_s=1
        )
        is None
    )


async def test_delete_fails_pending_deliveries(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock)
    job = await finish_job(storage, clock, tenant)
    assert not await storage.webhook_endpoint_delete(endpoint_id=endpoint.id, tenant_id="ten_x")
    assert await storage.webhook_endpoint_delete(
        endpoint_id=endpoint.id, tenant_id=tenant.id, now=clock.now()
    )
    assert await storage.webhook_endpoint_get(endpoint_id=endpoint.id) is None
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.last_error) == ("failed", "endpoint deleted")
    assert await storage.delivery_claim_due(limit=10, lease_s=30, now=clock.now()) == []


# -- the outbox the triggers write ----------------------------------------------------------


async def test_endpoints_receive_the_events_their_filters_admit(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    other = await make_tenant(storage, "other")
    every = await make_endpoint(storage, tenant, clock)
    running = await make_endpoint(storage, tenant, clock, event_types=("job.running",))
    failures = await make_endpoint(storage, tenant, clock, event_types=("job.failed",))
    await make_endpoint(storage, tenant, clock, disabled=True)
    await make_endpoint(storage, other, clock)
    job = await finish_job(storage, clock, tenant, webhook={"url": "https://j.example/h"})
    rows = await storage.outbox_for_job(job_id=job.id)
    assert sorted((r.event_type, r.target) for r in rows) == sorted(
        [
            ("job.running", running.id),
            ("job.succeeded", every.id),
            ("job.succeeded", "job"),
        ]
    )
    assert failures.id not in {r.target for r in rows}
    succeeded = [r for r in rows if r.event_type == "job.succeeded"]
    assert {r.event_id for r in succeeded} == {ids.event_id(job.id, "job.succeeded", 0)}


# -- claiming and recording -----------------------------------------------------------------


async def test_claim_leases_due_rows_with_what_sending_needs(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock, include_result=True)
    job = await finish_job(storage, clock, tenant, webhook={"url": "https://j.example/h"})
    claimed = await storage.delivery_claim_due(limit=10, lease_s=30, now=clock.now())
    by_target = {d.entry.target: d for d in claimed}
    assert set(by_target) == {endpoint.id, "job"}
    to_endpoint, to_job = by_target[endpoint.id], by_target["job"]
    assert to_endpoint.url == endpoint.url and to_endpoint.secrets == (endpoint.secret,)
    assert to_endpoint.include_result and to_endpoint.endpoint_state == ENDPOINT_ACTIVE
    assert to_job.url == "https://j.example/h" and to_job.secrets == (tenant.webhook_secret,)
    assert not to_job.include_result and to_job.limit_key == "url:https://j.example/h"
    for delivery in claimed:
        assert delivery.attempt == 1 and delivery.lease_token
        assert delivery.entry.job_id == job.id
        assert delivery.entry.next_attempt_at == clock.now() + timedelta(seconds=30)
    # Leased: nobody else gets them until the lease runs out.
    assert await storage.delivery_claim_due(limit=10, lease_s=30, now=clock.advance(29)) == []


async def test_claim_answers_both_secrets_only_during_the_grace(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock)
    await storage.webhook_endpoint_rotate_secret(
        endpoint_id=endpoint.id,
        tenant_id=tenant.id,
        secret="whsec_bmV3",
        grace_s=100,
        now=clock.now(),
    )
    await finish_job(storage, clock, tenant)
    await finish_job(storage, clock, tenant)
    [first, _] = await storage.delivery_claim_due(limit=1, lease_s=5, now=clock.now()) + [None]
    assert first is not None and first.secrets == ("whsec_bmV3", endpoint.secret)
    [second] = await storage.delivery_claim_due(limit=1, lease_s=5, now=clock.advance(101))
    assert second.secrets == ("whsec_bmV3",)


async def test_claim_flags_a_disabled_endpoint(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock)
    await finish_job(storage, clock, tenant)
    # Disabled after its delivery was written: the dispatcher must see it and not send.
    await storage.webhook_endpoint_update(
        endpoint_id=endpoint.id, tenant_id=tenant.id, changes=EndpointChanges(disabled=True)
    )
    [delivery] = await storage.delivery_claim_due(limit=5, lease_s=5, now=clock.now())
    assert delivery.endpoint_state == ENDPOINT_DISABLED


async def test_claim_skips_busy_limit_keys(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    busy = await make_endpoint(storage, tenant, clock)
    await finish_job(storage, clock, tenant, webhook={"url": "https://j.example/h"})
    claimed = await storage.delivery_claim_due(
        limit=10, lease_s=5, busy=[busy.id, "url:https://j.example/h"], now=clock.now()
    )
    assert claimed == []
    claimed = await storage.delivery_claim_due(limit=10, lease_s=5, busy=[busy.id], now=clock.now())
    assert [d.entry.target for d in claimed] == ["job"]


async def test_concurrent_claims_never_share_a_row(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await make_endpoint(storage, tenant, clock)
    for _ in range(12):
        await finish_job(storage, clock, tenant)
    batches = await asyncio.gather(
        *(storage.delivery_claim_due(limit=5, lease_s=30, now=clock.now()) for _ in range(4))
    )
    claimed = [d.entry.id for batch in batches for d in batch]
    assert len(claimed) == 12 and len(set(claimed)) == 12


async def test_record_success_and_attempts(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock)
    job = await finish_job(storage, clock, tenant)
    [delivery] = await storage.delivery_claim_due(limit=5, lease_s=30, now=clock.now())
    assert await storage.delivery_record(delivery=delivery, outcome=retry(5), now=clock.advance(1))
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.attempts, row.last_status_code) == ("pending", 1, 500)
    assert row.next_attempt_at == clock.now() + timedelta(seconds=5)
    assert await storage.delivery_claim_due(limit=5, lease_s=30, now=clock.advance(4)) == []
    [again] = await storage.delivery_claim_due(limit=5, lease_s=30, now=clock.advance(1))
    assert again.attempt == 2 and again.lease_token != delivery.lease_token
    assert await storage.delivery_record(delivery=again, outcome=SUCCEEDED, now=clock.advance(1))
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.attempts, row.last_error) == ("succeeded", 2, None)
    assert row.completed_at == clock.now()
    attempts = await storage.delivery_attempts_for_job(job_id=job.id)
    assert [(a.attempt, a.status_code, a.succeeded, a.error) for a in attempts] == [
        (1, 500, False, "HTTP 500"),
        (2, 200, True, None),
    ]
    assert {a.target for a in attempts} == {endpoint.id}
    assert {a.event_id for a in attempts} == {delivery.entry.event_id}
    assert [a.latency_ms for a in attempts] == [7, 12]
    assert await storage.delivery_claim_due(limit=5, lease_s=30, now=clock.advance(999)) == []


async def test_record_is_fenced_on_the_lease_token(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await make_endpoint(storage, tenant, clock)
    job = await finish_job(storage, clock, tenant)
    [stale] = await storage.delivery_claim_due(limit=5, lease_s=10, now=clock.now())
    # The first dispatcher stalls past its lease; a second one takes the row over.
    [current] = await storage.delivery_claim_due(limit=5, lease_s=10, now=clock.advance(11))
    assert current.attempt == 2
    assert not await storage.delivery_record(
        delivery=stale, outcome=SUCCEEDED, now=clock.advance(1)
    )
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert row.state == "pending"  # the stale result did not land ...
    assert len(await storage.delivery_attempts_for_job(job_id=job.id)) == 1  # ... but is logged
    assert not await storage.delivery_release(delivery=stale, now=clock.now())
    assert await storage.delivery_record(delivery=current, outcome=retry(0, 503), now=clock.now())
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.last_status_code) == ("pending", 503)


async def test_record_final_failure_and_disable(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock)
    job = await finish_job(storage, clock, tenant)
    [delivery] = await storage.delivery_claim_due(limit=5, lease_s=10, now=clock.now())
    gone = DeliveryOutcome(
        state="failed",
        attempted=True,
        status_code=410,
        latency_ms=3,
        error="410 Gone",
        disable_endpoint="gone",
    )
    assert await storage.delivery_record(delivery=delivery, outcome=gone, now=clock.now())
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.last_status_code, row.completed_at) == ("failed", 410, clock.now())
    disabled = await storage.webhook_endpoint_get(endpoint_id=endpoint.id)
    assert disabled is not None and disabled.disabled and disabled.disabled_reason == "gone"
    # A disabled endpoint gets no new rows.
    later = await finish_job(storage, clock, tenant)
    assert await storage.outbox_for_job(job_id=later.id) == []


async def test_unattempted_outcome_writes_no_attempt(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await make_endpoint(storage, tenant, clock)
    job = await finish_job(storage, clock, tenant)
    [delivery] = await storage.delivery_claim_due(limit=5, lease_s=10, now=clock.now())
    skipped = DeliveryOutcome(state="failed", attempted=False, error="endpoint disabled")
    assert await storage.delivery_record(delivery=delivery, outcome=skipped, now=clock.now())
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert (row.state, row.last_error, row.last_status_code) == (
        "failed",
        "endpoint disabled",
        None,
    )
    assert await storage.delivery_attempts_for_job(job_id=job.id) == []


async def test_release_refunds_the_attempt(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await make_endpoint(storage, tenant, clock)
    job = await finish_job(storage, clock, tenant)
    [delivery] = await storage.delivery_claim_due(limit=5, lease_s=10, now=clock.now())
    assert await storage.delivery_release(delivery=delivery, delay_s=2, now=clock.now())
    [row] = await storage.outbox_for_job(job_id=job.id)
    assert row.attempts == 0 and row.next_attempt_at == clock.now() + timedelta(seconds=2)
    assert not await storage.delivery_record(delivery=delivery, outcome=SUCCEEDED)
    [again] = await storage.delivery_claim_due(limit=5, lease_s=10, now=clock.advance(2))
    assert again.attempt == 1


async def test_recover_requeues_failures_since(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    endpoint = await make_endpoint(storage, tenant, clock)
    old = await finish_job(storage, clock, tenant, state=JobState.FAILED)
    since = clock.advance(60)
    new = await finish_job(storage, clock, tenant)
    ok = await finish_job(storage, clock, tenant)
    for delivery in await storage.delivery_claim_due(limit=5, lease_s=10, now=clock.now()):
        outcome = (
            SUCCEEDED
            if delivery.entry.job_id == ok.id
            else DeliveryOutcome(state="failed", attempted=True, status_code=500, error="x")
        )
        assert await storage.delivery_record(delivery=delivery, outcome=outcome, now=clock.now())
    assert (
        await storage.delivery_recover(
            endpoint_id=endpoint.id, tenant_id="ten_x", since=since, now=clock.now()
        )
        == 0
    )
    assert (
        await storage.delivery_recover(
            endpoint_id=endpoint.id, tenant_id=tenant.id, since=since, now=clock.advance(1)
        )
        == 1
    )
    [recovered] = await storage.delivery_claim_due(limit=5, lease_s=10, now=clock.now())
    assert recovered.entry.job_id == new.id and recovered.attempt == 1
    [row] = await storage.outbox_for_job(job_id=old.id)
    assert row.state == "failed"
    [row] = await storage.outbox_for_job(job_id=ok.id)
    assert row.state == "succeeded"
