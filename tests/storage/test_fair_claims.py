"""Fair claiming across tenants: caps, weights, blocked tenants; both backends agree with
domain.fairness."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from jobgate.storage.protocol import Storage
from jobgate.storage.records import ClaimPolicy, TenantShare
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def fill(storage: Storage, clock: FakeClock, tenant_name: str, count: int, **fields: object):  # type: ignore[no-untyped-def]
    tenant = await make_tenant(storage, tenant_name)
    for _ in range(count):
        await submit_one(storage, job=new_job(tenant, **fields), now=clock.now())
    return tenant


async def claim(
    storage: Storage, clock: FakeClock, limit: int, policy: ClaimPolicy | None = None
) -> Counter[str]:
    jobs = await storage.job_claim(
        worker_id="w", limit=limit, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    return Counter(job.tenant_id for job in jobs)


async def test_a_flooding_tenant_does_not_starve_another(
    storage: Storage, clock: FakeClock
) -> None:
    flood = await fill(storage, clock, "flood", 200)
    clock.advance(1)
    small = await fill(storage, clock, "small", 3)
    got = await claim(storage, clock, 4)
    # Older jobs do not win on age across tenants: both get slots in the first claim.
    assert got[small.id] >= 2 and got[flood.id] >= 1


async def test_caps_hold(storage: Storage, clock: FakeClock) -> None:
    capped = await fill(storage, clock, "capped", 10)
    free = await fill(storage, clock, "free", 10)
    policy = ClaimPolicy(tenants={capped.id: TenantShare(max_running=2)})
    got = await claim(storage, clock, 8, policy)
    assert got[capped.id] == 2 and got[free.id] == 6
    again = await claim(storage, clock, 8, policy)
    assert again[capped.id] == 0 and again[free.id] == 4


async def test_weights_divide_slots(storage: Storage, clock: FakeClock) -> None:
    light = await fill(storage, clock, "light", 20)
    heavy = await fill(storage, clock, "heavy", 20)
    policy = ClaimPolicy(tenants={heavy.id: TenantShare(weight=3)})
    got = await claim(storage, clock, 8, policy)
    assert (got[light.id], got[heavy.id]) == (2, 6)


async def test_running_work_counts_against_the_share(storage: Storage, clock: FakeClock) -> None:
    busy = await fill(storage, clock, "busy", 10)
    assert (await claim(storage, clock, 3))[busy.id] == 3
    idle = await fill(storage, clock, "idle", 10)
    got = await claim(storage, clock, 3)
    assert (got[busy.id], got[idle.id]) == (0, 3)  # idle is furthest below its share


async def test_blocked_tenants_get_nothing(storage: Storage, clock: FakeClock) -> None:
    spent = await fill(storage, clock, "spent", 5)
    other = await fill(storage, clock, "other", 5)
    got = await claim(storage, clock, 10, ClaimPolicy(blocked_tenants=frozenset({spent.id})))
    assert got == Counter({other.id: 5})


async def test_priority_orders_within_a_tenant(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage, "solo")
    low = (await submit_one(storage, job=new_job(tenant, priority=9), now=clock.now())).job
    urgent = (await submit_one(storage, job=new_job(tenant, priority=0), now=clock.now())).job
    jobs = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    assert [j.id for j in jobs] == [urgent.id]
    assert low.id != urgent.id


async def test_default_cap_applies_to_every_tenant(storage: Storage, clock: FakeClock) -> None:
    a = await fill(storage, clock, "a", 5)
    b = await fill(storage, clock, "b", 5)
    got = await claim(storage, clock, 10, ClaimPolicy(default=TenantShare(max_running=1)))
    assert got == Counter({a.id: 1, b.id: 1})


async def test_caps_hold_under_concurrent_claims(storage: Storage) -> None:
    capped = await make_tenant(storage, "capped")
    for _ in range(30):
        await submit_one(storage, job=new_job(capped))
    policy = ClaimPolicy(tenants={capped.id: TenantShare(max_running=3)})
    batches = await asyncio.gather(
        *(
            storage.job_claim(worker_id=f"w{i}", limit=2, lease_ttl_s=60, policy=policy)
            for i in range(10)
        )
    )
    assert sum(len(b) for b in batches) == 3
