"""The ScheduleStore part of the contract, on both backends: a tenant's cap holds exactly under
concurrent creates, due schedules come fairly (every tenant's oldest slot before anyone's
second), and the list pages by keyset."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest

from jobgate.storage.protocol import Storage
from jobgate.storage.records import Schedule
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant

pytestmark = pytest.mark.asyncio
TEMPLATE = {"endpoint": "/v1/chat/completions", "body": {"model": "sim-echo", "messages": []}}


def _schedule(n: int, tenant_id: str, slot: datetime, created: datetime) -> Schedule:
    return Schedule(
        id=f"sched_{tenant_id}_{n:05d}",
        tenant_id=tenant_id,
        cron="* * * * *",
        template=TEMPLATE,
        paused=False,
        next_run_at=slot,
        created_at=created + timedelta(seconds=n),
    )


async def test_a_tenants_cap_holds_under_concurrent_creates(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage, "acme")
    other = await make_tenant(storage, "other")
    now = clock.now()
    stored = await asyncio.gather(
        *(
            storage.schedule_insert(schedule=_schedule(n, tenant.id, now, now), max_per_tenant=5)
            for n in range(12)
        )
    )
    assert sum(s is not None for s in stored) == 5
    assert len(await storage.schedule_list(tenant_id=tenant.id, limit=100)) == 5
    # Another tenant has a cap of its own.
    theirs = await storage.schedule_insert(
        schedule=_schedule(0, other.id, now, now), max_per_tenant=5
    )
    assert theirs is not None


async def test_due_schedules_take_turns_by_tenant(storage: Storage, clock: FakeClock) -> None:
    """One tenant's many due slots (older ones too) never come before another's first."""
    busy = await make_tenant(storage, "busy")
    quiet = await make_tenant(storage, "quiet")
    slot = clock.now()
    for n in range(30):  # older slots than the quiet tenant's, and more of them
        older = slot - timedelta(minutes=1)
        await storage.schedule_insert(
            schedule=_schedule(n, busy.id, older, slot), max_per_tenant=1000
        )
    await storage.schedule_insert(schedule=_schedule(0, quiet.id, slot, slot), max_per_tenant=1000)
    due = await storage.schedule_due(limit=5, now=slot)
    assert len(due) == 5
    assert {s.tenant_id for s in due[:2]} == {busy.id, quiet.id}  # each tenant's first turn
    assert [s.tenant_id for s in due[2:]] == [busy.id] * 3  # then the busy one's next ones
    assert [s.id for s in due if s.tenant_id == busy.id] == [
        f"sched_{busy.id}_{n:05d}" for n in range(4)
    ]  # oldest first within a tenant


async def test_the_list_pages_by_keyset(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage, "acme")
    now = clock.now()
    for n in range(7):
        await storage.schedule_insert(schedule=_schedule(n, tenant.id, now, now), max_per_tenant=9)
    first = await storage.schedule_list(tenant_id=tenant.id, limit=3)
    second = await storage.schedule_list(tenant_id=tenant.id, after=first[-1].id, limit=3)
    third = await storage.schedule_list(tenant_id=tenant.id, after=second[-1].id, limit=3)
    ids = [s.id for s in first + second + third]
    assert ids == [f"sched_{tenant.id}_{n:05d}" for n in range(7)]
    assert await storage.schedule_list(tenant_id=tenant.id, after=ids[-1], limit=3) == []
