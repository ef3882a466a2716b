"""The AdminStore part of the contract (what operators see), on both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job

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
        await storage.job_insert(job=new_job(busy), now=clock.now())
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
        ids.append((await storage.job_insert(job=new_job(owner), now=clock.now())).job.id)
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


async def test_endpoint_health_lists_every_endpoint(storage: Storage) -> None:
    assert await storage.admin_endpoint_health() == []
