"""The WaitStore part of the contract, on both backends: what the claim would read about queued
jobs (the pause covering each, the slots their tenant and key hold), per job and in groups."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def _insert(storage: Storage, clock: FakeClock, tenant_name: str, **fields: object) -> str:
    tenant = await storage.tenant_get(name=tenant_name) or await make_tenant(storage, tenant_name)
    return (await submit_one(storage, job=new_job(tenant, **fields), now=clock.now())).job.id


async def _pause(storage: Storage, clock: FakeClock, pause_id: str, **scope: str) -> None:
    await storage.pause_insert(
        pause_id=pause_id,
        provider=scope.get("provider"),
        model=scope.get("model"),
        tenant_id=scope.get("tenant_id"),
        reason=scope.get("reason"),
        created_by="ops",
        now=clock.now(),
    )
    clock.advance(1)


async def _running(
    storage: Storage, clock: FakeClock, tenant_name: str, count: int, **fields: object
) -> None:
    for _ in range(count):
        await _insert(storage, clock, tenant_name, **fields)
    claimed = await storage.job_claim(worker_id="w", limit=count, lease_ttl_s=60, now=clock.now())
    assert len(claimed) == count


async def test_the_oldest_covering_pause_of_each_queued_job(
    storage: Storage, clock: FakeClock
) -> None:
    echo = await _insert(storage, clock, "acme", model="sim-echo")
    slow = await _insert(storage, clock, "acme", model="sim-slow")
    theirs = await _insert(storage, clock, "beta")
    acme = await storage.tenant_get(name="acme")
    assert acme is not None
    await _pause(storage, clock, "pause_a", model="sim-other")
    await _pause(storage, clock, "pause_b", model="sim-echo", reason="bad outputs")
    await _pause(storage, clock, "pause_c", provider="sim")
    facts = await storage.job_wait_facts(
        tenant_id=acme.id,
        job_ids=[echo, slow, theirs, "job_missing"],
        count_running=False,
        count_keys=False,
        now=clock.now(),
    )
    assert set(facts) == {echo, slow}  # another tenant's job, a missing one: left out
    assert facts[echo].pause == {"id": "pause_b", "reason": "bad outputs"}
    assert facts[slow].pause == {"id": "pause_c", "reason": None}
    assert facts[echo].now == clock.now()
    assert facts[echo].running is None and facts[echo].key_running is None
    await storage.pause_delete(pause_id=None)
    facts = await storage.job_wait_facts(
        tenant_id=acme.id, job_ids=[echo], count_running=False, count_keys=False
    )
    assert facts[echo].pause is None
    assert abs((facts[echo].now - clock.now()).total_seconds()) < 3600  # the database's clock


async def test_slots_are_counted_as_the_claim_counts_them(
    storage: Storage, clock: FakeClock
) -> None:
    await _running(storage, clock, "acme", 2, concurrency_key="user-1")
    await _running(storage, clock, "acme", 1, concurrency_key="user-2")
    await _running(storage, clock, "beta", 3)
    keyed = await _insert(storage, clock, "acme", concurrency_key="user-1")
    bare = await _insert(storage, clock, "acme")
    acme = await storage.tenant_get(name="acme")
    assert acme is not None
    facts = await storage.job_wait_facts(
        tenant_id=acme.id,
        job_ids=[keyed, bare],
        count_running=True,
        count_keys=True,
        now=clock.now(),
    )
    assert (facts[keyed].running, facts[keyed].key_running) == (3, 2)
    assert (facts[bare].running, facts[bare].key_running) == (3, None)
    claimed = await storage.job_claim(worker_id="w", limit=10, lease_ttl_s=60, now=clock.now())
    assert {job.id for job in claimed} == {keyed, bare}
    assert (
        await storage.job_wait_facts(
            tenant_id=acme.id, job_ids=[keyed], count_running=True, count_keys=True
        )
        == {}
    )  # no longer queued


async def test_groups_count_every_queued_job_once(storage: Storage, clock: FakeClock) -> None:
    await _running(storage, clock, "acme", 1, model="sim-slow")
    for _ in range(3):
        await _insert(storage, clock, "acme", model="sim-echo", concurrency_key="k")
    later_at = clock.now() + timedelta(hours=1)
    await _insert(storage, clock, "acme", model="sim-echo", run_at=later_at)
    await _insert(storage, clock, "beta", model="sim-slow")
    beta = await storage.tenant_get(name="beta")
    acme = await storage.tenant_get(name="acme")
    assert beta is not None and acme is not None
    await _pause(storage, clock, "pause_b", tenant_id=beta.id, reason="quota")

    groups = await storage.queued_wait_groups(
        keys=False, capped_tenants=[acme.id], limit=100, now=clock.now()
    )
    by_shape = {(g.tenant_id, g.model, g.scheduled): g for g in groups}
    assert sum(g.queued for g in groups) == 5 and len(groups) == 3
    now_group = by_shape[(acme.id, "sim-echo", False)]
    assert now_group.queued == 3 and now_group.concurrency_key is None  # keys not asked
    assert now_group.running == 1 and now_group.pause is None
    later = by_shape[(acme.id, "sim-echo", True)]
    assert later.queued == 1 and later.run_at == later_at
    paused = by_shape[(beta.id, "sim-slow", False)]
    assert paused.pause == {"id": "pause_b", "reason": "quota"} and paused.running is None
    assert paused.now == clock.now()

    keyed = await storage.queued_wait_groups(keys=True, capped_tenants=[], limit=1, now=clock.now())
    assert len(keyed) == 1  # the largest group first
    assert (keyed[0].queued, keyed[0].concurrency_key, keyed[0].key_running) == (3, "k", 0)


async def test_a_status_read_says_what_holds_a_queued_job(
    storage: Storage, clock: FakeClock
) -> None:
    job_id = await _insert(storage, clock, "acme")
    acme = await storage.tenant_get(name="acme")
    assert acme is not None
    status = await storage.job_status(job_id=job_id, tenant_id=acme.id, now=clock.now())
    assert status is not None and status.wait is not None
    assert (status.wait.pause, status.wait.queue_position) == (None, 1)
    assert status.wait.now == clock.now()
    await _pause(storage, clock, "pause_t", tenant_id=acme.id, reason="audit")
    status = await storage.job_status(job_id=job_id, tenant_id=acme.id, now=clock.now())
    assert status is not None and status.wait is not None
    assert status.wait.pause == {"id": "pause_t", "reason": "audit"}
    # What the wait queries read, the status read reads: the same pause, the same place.
    (facts,) = (
        await storage.job_wait_facts(
            tenant_id=acme.id,
            job_ids=[job_id],
            count_running=False,
            count_keys=False,
            count_positions=True,
            now=clock.now(),
        )
    ).values()
    assert facts == status.wait
    await storage.pause_delete(pause_id=None)
    await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    running = await storage.job_status(job_id=job_id, tenant_id=acme.id, now=clock.now())
    assert running is not None and running.wait is None
