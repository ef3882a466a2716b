"""The RolesStore part of the contract (role heartbeats), on both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def test_a_role_never_seen_has_no_age(storage: Storage) -> None:
    assert await storage.role_heartbeat_age_s(role="reconciler") is None


async def test_the_age_is_that_of_the_freshest_instance(storage: Storage, clock: FakeClock) -> None:
    start = clock.now()
    await storage.role_heartbeat(role="reconciler", instance="proc_a", now=start)
    await storage.role_heartbeat(
        role="worker", instance="proc_w", now=start + timedelta(seconds=50)
    )
    later = start + timedelta(seconds=40)
    assert await storage.role_heartbeat_age_s(role="reconciler", now=later) == pytest.approx(40)
    await storage.role_heartbeat(
        role="reconciler", instance="proc_b", now=start + timedelta(seconds=30)
    )
    assert await storage.role_heartbeat_age_s(role="reconciler", now=later) == pytest.approx(10)
    # A beat is idempotent and moves its own row forward.
    await storage.role_heartbeat(role="reconciler", instance="proc_a", now=later)
    await storage.role_heartbeat(role="reconciler", instance="proc_a", now=later)
    assert await storage.role_heartbeat_age_s(role="reconciler", now=later) == pytest.approx(0)
    assert await storage.role_heartbeat_age_s(role="dispatcher", now=later) is None


async def test_instances_unseen_for_a_day_are_forgotten(storage: Storage, clock: FakeClock) -> None:
    start = clock.now()
    await storage.role_heartbeat(role="reconciler", instance="proc_old", now=start)
    next_day = start + timedelta(days=1, seconds=1)
    await storage.role_heartbeat(role="reconciler", instance="proc_new", now=next_day)
    # Only the new instance is left: going back before it shows nobody older.
    assert await storage.role_heartbeat_age_s(
        role="reconciler", now=next_day + timedelta(seconds=5)
    ) == pytest.approx(5)
    await storage.role_heartbeat(role="reconciler", instance="proc_new", now=start)
    assert await storage.role_heartbeat_age_s(role="reconciler", now=start) == pytest.approx(0)


async def test_the_database_clock_by_default(storage: Storage) -> None:
    await storage.role_heartbeat(role="reconciler", instance="proc_a")
    age = await storage.role_heartbeat_age_s(role="reconciler")
    assert age is not None and 0 <= age < 30


async def test_every_role_age_in_one_read(storage: Storage, clock: FakeClock) -> None:
    start = clock.now()
    assert await storage.role_heartbeat_ages(now=start) == {}
    await storage.role_heartbeat(role="worker", instance="proc_a", now=start)
    await storage.role_heartbeat(role="worker", instance="proc_b", now=start + timedelta(seconds=5))
    await storage.role_heartbeat(role="batches", instance="proc_a", now=start)
    ages = await storage.role_heartbeat_ages(now=start + timedelta(seconds=20))
    assert ages == {"worker": pytest.approx(15), "batches": pytest.approx(20)}


async def test_a_stopped_process_is_forgotten_at_once(storage: Storage, clock: FakeClock) -> None:
    await storage.role_heartbeat(role="worker", instance="proc_a", now=clock.now())
    await storage.role_heartbeat(role="worker", instance="proc_b", now=clock.now())
    await storage.role_heartbeat_forget(role="worker", instance="proc_a")
    assert await storage.role_heartbeat_age_s(role="worker", now=clock.now()) == 0
    await storage.role_heartbeat_forget(role="worker", instance="proc_b")
    await storage.role_heartbeat_forget(role="worker", instance="proc_b")  # idempotent
    assert await storage.role_heartbeat_age_s(role="worker", now=clock.now()) is None
    assert await storage.role_heartbeat_ages(now=clock.now()) == {}


async def test_which_roles_have_work(storage: Storage, clock: FakeClock) -> None:
    assert await storage.roles_with_work() == frozenset()
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    assert await storage.roles_with_work() == {"worker"}
    await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    assert await storage.roles_with_work() == {"reaper"}  # a lease to watch
