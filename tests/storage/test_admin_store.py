"""The AdminStore part of the contract (what operators see), on both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import DeliveryOutcome
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.storage.webhook_helpers import finish_job, make_endpoint

pytestmark = pytest.mark.asyncio


async def test_operator_keys(storage: Storage) -> None:
    assert await storage.operator_key_count() == 0
    await storage.operator_key_create(
        key_id="opk_1", name="ada", key_hash="h1", key_prefix="jgo_abc"
    )
    assert await storage.operator_key_count() == 1
    assert await storage.operator_key_name(key_hash="h1") == "ada"
    assert await storage.operator_key_name(key_hash="nope") is None


async def test_overview_counts_and_waits(storage: Storage, clock: FakeClock) -> None:
    busy = await make_tenant(storage, "busy")
    await make_tenant(storage, "idle")
    for _ in range(3):
        await submit_one(storage, job=new_job(busy), now=clock.now())
    await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    clock.advance(30)
    rows = {row.tenant_name: row for row in await storage.admin_overview(now=clock.now())}
    assert (rows["busy"].queued, rows["busy"].running, rows["busy"].dead_lettered) == (2, 1, 0)
    assert rows["busy"].oldest_due_at == clock.now() - timedelta(seconds=30)
    assert (rows["idle"].queued, rows["idle"].oldest_due_at) == (0, None)


async def test_job_list_across_tenants(storage: Storage, clock: FakeClock) -> None:
    a = await make_tenant(storage, "a")
    b = await make_tenant(storage, "b")
    ids = []
    for owner in (a, b, a):
        ids.append((await submit_one(storage, job=new_job(owner), now=clock.now())).job.id)
        clock.advance(1)
    everyone = await storage.admin_job_list(limit=10)
    assert [j.id for j in everyone] == ids[::-1]
    assert [j.id for j in await storage.admin_job_list(tenant_id=b.id)] == [ids[1]]
    page = await storage.admin_job_list(limit=1)
    assert [j.id for j in await storage.admin_job_list(after=page[0].id, limit=1)] == [ids[1]]
    await storage.job_cancel(job_id=ids[0], tenant_id=a.id, actor="t", now=clock.now())
    cancelled = await storage.admin_job_list(states=[JobState.CANCELLED])
    assert [j.id for j in cancelled] == [ids[0]]
    assert await storage.admin_job_list(dead_lettered=True) == []


async def test_endpoint_health_lists_every_endpoint(storage: Storage, clock: FakeClock) -> None:
    assert await storage.admin_endpoint_health(min_attempts=3) == []
    tenant = await make_tenant(storage, "acme")
    endpoint = await make_endpoint(storage, tenant, clock)
    clock.advance(1)  # listed in the order they were created
    quiet = await make_endpoint(storage, tenant, clock)
    [health, idle] = await storage.admin_endpoint_health(min_attempts=3)
    assert (health.endpoint_id, idle.endpoint_id) == (endpoint.id, quiet.id)
    assert (idle.failing, idle.pending, idle.failed) == (False, 0, 0)


async def test_an_endpoint_is_failing_when_the_alert_gauge_says_so(
    storage: Storage, clock: FakeClock
) -> None:
    """A delivery still pending after 3 failed attempts makes its endpoint failing, at the
    same attempt for the console's health as for jobgate_webhook_endpoints_failing."""
    tenant = await make_tenant(storage, "acme")
    endpoint = await make_endpoint(storage, tenant, clock)
    await finish_job(storage, clock, tenant)
    refused = DeliveryOutcome(
        state="pending", attempted=True, status_code=None, latency_ms=5,
        error="ConnectError", retry_in_s=1,
    )  # fmt: skip
    for attempt in range(1, 4):
        [health] = await storage.admin_endpoint_health(min_attempts=3)
        gauge = await storage.webhook_endpoints_failing(min_attempts=3)
        assert health.failing is (attempt > 3) and gauge == {}
        clock.advance(2)
        [delivery] = await storage.delivery_claim_due(limit=5, lease_s=30, now=clock.now())
        assert await storage.delivery_record(delivery=delivery, outcome=refused, now=clock.now())
    [health] = await storage.admin_endpoint_health(min_attempts=3)
    assert (health.endpoint_id, health.failing, health.pending) == (endpoint.id, True, 1)
    assert health.last_error == "ConnectError" and health.failed == 0
    assert await storage.webhook_endpoints_failing(min_attempts=3) == {tenant.id: 1}
