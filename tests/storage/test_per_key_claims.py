"""The per end user limits in the claim, on both backends: a concurrency key under its tenant's
rpm_per_key starts one job per 60 / rpm seconds (its shared bucket, the provider limits'
rules), a key over a daily budget per key is passed over, other keys and jobs without a key go
on, and claims by id (the transports' workers) apply the same rules."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from jobgate.config import Settings
from jobgate.domain import rate_limits
from jobgate.roles.retention import Retention
from jobgate.storage.protocol import Storage
from jobgate.storage.records import ClaimPolicy, Tenant, TenantShare
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def submit(
    storage: Storage, clock: FakeClock, tenant: Tenant, *keys: str | None
) -> dict[str, str | None]:
    """One job per key given, oldest first; their keys by job id. The clock is then left on a
    whole second, so that a bucket's times (Unix seconds, floats) add up exactly."""
    keyed: dict[str, str | None] = {}
    for key in keys:
        job = new_job(tenant, concurrency_key=key)
        keyed[(await submit_one(storage, job=job, now=clock.now())).job.id] = key
        clock.advance(0.001)  # a distinct run_at each: a stable order
    now = clock.now()
    clock.set(now.replace(microsecond=0) + timedelta(seconds=1))
    return keyed


async def claimed(
    storage: Storage, clock: FakeClock, policy: ClaimPolicy, limit: int = 10
) -> list[str]:
    jobs = await storage.job_claim(
        worker_id="w", limit=limit, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    return [job.id for job in jobs]


async def test_a_key_starts_one_job_per_spacing_exactly_at_its_rpm(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    first, second, third = await submit(storage, clock, tenant, "u1", "u1", "u1")
    policy = ClaimPolicy(tenants={tenant.id: TenantShare(rpm_per_key=2)})  # one per 30 s
    assert await claimed(storage, clock, policy) == [first]  # one start per claim, not three
    clock.advance(29.999)
    assert await claimed(storage, clock, policy) == []
    clock.advance(0.001)  # exactly 60 / rpm after the first start
    assert await claimed(storage, clock, policy) == [second]
    clock.advance(30)
    assert await claimed(storage, clock, policy) == [third]


async def test_keys_are_limited_apart_and_jobs_without_a_key_are_not(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    keyed = await submit(storage, clock, tenant, "alice", "alice", "bob", "bob", None, None)
    policy = ClaimPolicy(default=TenantShare(rpm_per_key=1))
    first = Counter(keyed[job_id] for job_id in await claimed(storage, clock, policy))
    assert first == Counter({"alice": 1, "bob": 1, None: 2})
    assert await claimed(storage, clock, policy) == []
    clock.advance(60)
    second = Counter(keyed[job_id] for job_id in await claimed(storage, clock, policy))
    assert second == Counter({"alice": 1, "bob": 1})


async def test_a_key_at_its_rate_does_not_hold_back_the_keys_behind_it(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    keyed = await submit(storage, clock, tenant, *(["busy"] * 6), "quiet")
    policy = ClaimPolicy(default=TenantShare(rpm_per_key=1))
    # The busy key's oldest jobs come first, but it may start one: this claim takes fewer than
    # its limit (the worker claims again at once while claims yield jobs) ...
    assert [keyed[i] for i in await claimed(storage, clock, policy, limit=2)] == ["busy"]
    # ... and the next no longer even scans the busy key's jobs: the quiet key goes on.
    assert [keyed[i] for i in await claimed(storage, clock, policy, limit=2)] == ["quiet"]


async def test_the_limit_is_one_bucket_per_key_shared_by_every_claimer(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    await submit(storage, clock, tenant, "u1", "u1")
    policy = ClaimPolicy(default=TenantShare(rpm_per_key=1))
    assert len(await claimed(storage, clock, policy)) == 1
    bucket = rate_limits.key_bucket(tenant.id, "u1", 1)
    waits = await storage.rate_limit_waits(buckets=[bucket], now=clock.now())
    assert waits == {(bucket.provider, bucket.model): pytest.approx(60.0)}
    # A second worker (another claimer, the same database) finds the bucket taken.
    other = await storage.job_claim(
        worker_id="w2", limit=10, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    assert other == []


async def test_rate_and_cap_per_key_apply_together(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    first, second, _ = await submit(storage, clock, tenant, "u1", "u1", "u1")
    policy = ClaimPolicy(default=TenantShare(max_running_per_key=1, rpm_per_key=60))
    assert await claimed(storage, clock, policy) == [first]
    clock.advance(5)  # the rate admits one more, the cap does not (the first still runs)
    assert await claimed(storage, clock, policy) == []
    loose = ClaimPolicy(default=TenantShare(max_running_per_key=2, rpm_per_key=60))
    assert await claimed(storage, clock, loose) == [second]


async def test_a_key_over_its_budget_is_passed_over_the_others_go_on(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    other = await make_tenant(storage, name="other")
    keyed = await submit(storage, clock, tenant, "spent", "spent", "fresh", None)
    same_key = await submit(storage, clock, other, "spent")
    policy = ClaimPolicy(blocked_keys={(tenant.id, "spent"): "daily_token_budget_per_key"})
    found = await claimed(storage, clock, policy)
    assert Counter(keyed.get(i, "other's") for i in found) == Counter(
        {"fresh": 1, None: 1, "other's": 1}  # another tenant's key of the same name is its own
    )
    assert set(same_key) <= set(found)
    assert await claimed(storage, clock, policy) == []
    assert len(await claimed(storage, clock, ClaimPolicy())) == 2  # the budget lifted


async def test_claims_by_id_apply_the_rate_and_the_budgets_per_key(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    keyed = await submit(storage, clock, tenant, "u1", "u1", "spent", None)
    ids = sorted(keyed)
    policy = ClaimPolicy(
        default=TenantShare(rpm_per_key=1),
        blocked_keys={(tenant.id, "spent"): "daily_cost_budget_usd_per_key"},
    )
    result = await storage.job_claim_by_id(
        worker_id="w", job_ids=ids, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    assert Counter(keyed[j.id] for j in result.claimed) == Counter({"u1": 1, None: 1})
    assert len(result.deferred) == 2  # still queued: their messages are deferred, not dropped
    again = await storage.job_claim_by_id(
        worker_id="w", job_ids=result.deferred, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    assert again.claimed == []
    clock.advance(timedelta(seconds=60).total_seconds())
    later = await storage.job_claim_by_id(
        worker_id="w", job_ids=result.deferred, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    assert [keyed[j.id] for j in later.claimed] == ["u1"]
    # A claim by id and a claim of the queue take from the same bucket.
    assert await claimed(storage, clock, policy) == []


async def test_the_buckets_of_keys_idle_for_a_minute_are_forgotten(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    tenant = await make_tenant(storage)
    keyed = await submit(storage, clock, tenant, "idle", "other", "busy", "busy")
    policy = ClaimPolicy(default=TenantShare(rpm_per_key=1))
    assert len(await claimed(storage, clock, policy)) == 3  # one bucket per key taken
    provider = rate_limits.Bucket("sim", rate_limits.PROVIDER_WIDE, rpm=1)
    assert (await storage.rate_limit_take(buckets=[provider], now=clock.now())).admitted
    clock.advance(90)  # every bucket open again, but for 30 s only
    assert await storage.rate_limit_key_purge(limit=10, now=clock.now()) == 0
    assert [keyed[i] for i in await claimed(storage, clock, policy)] == ["busy"]
    clock.advance(31)  # idle's and other's open for over a minute; busy's taken again
    assert await storage.rate_limit_key_purge(limit=1, now=clock.now()) == 1
    assert await storage.rate_limit_key_purge(limit=10, now=clock.now()) == 1
    # A provider's bucket is never a key's, however long idle; busy's goes once it is idle.
    clock.advance(90)
    swept = await Retention(storage=storage, settings=settings).sweep_once(now=clock.now())
    assert swept["rate_limit_buckets"] == 1
    assert await storage.rate_limit_key_purge(limit=10, now=clock.now()) == 0
    # A forgotten bucket starts empty: the key starts its next job at once.
    await submit(storage, clock, tenant, "idle")
    assert len(await claimed(storage, clock, policy)) == 1
