"""A worker on a broker keeps its messages invisible with each heartbeat, beside the renewals,
never in their way: a broker slow to answer (an overloaded SQS endpoint) once held every beat,
so no lease was renewed, every call was stopped and its job went back to the queue."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from jobgate.config import Settings
from jobgate.domain.job import Lease
from jobgate.roles.lease_keeper import InFlight, LeaseKeeper
from jobgate.storage.records import HeartbeatResult
from jobgate.testing import FakeClock

pytestmark = pytest.mark.asyncio


class RenewingStore:
    def __init__(self) -> None:
        self.renewals = 0

    async def job_heartbeat(
        self, *, leases: Sequence[Lease], lease_ttl_s: float, now: Any = None
    ) -> list[HeartbeatResult]:
        self.renewals += 1
        return [HeartbeatResult(lease.job_id, cancel_requested=False) for lease in leases]


class SlowBroker:
    """An intake whose visibility extension answers only when the test lets it."""

    def __init__(self) -> None:
        self.calls = 0
        self.answer = asyncio.Event()

    async def extend(self, leases: Sequence[Lease]) -> None:
        self.calls += 1
        await self.answer.wait()


def keeper(store: RenewingStore, broker: SlowBroker, clock: FakeClock) -> LeaseKeeper:
    job: Any = type("J", (), {"id": "job_1"})()
    inflight = {"job_1": InFlight(job=job, lease=Lease("job_1", "t1"), renewed_at=0.0)}
    return LeaseKeeper(
        storage=store,  # type: ignore[arg-type]
        settings=Settings(lease_ttl_s=5, heartbeat_interval_s=1),
        clock=clock,
        worker_id="w",
        inflight=inflight,
        intake=broker,  # type: ignore[arg-type]
    )


async def test_a_slow_broker_holds_up_no_renewal(clock: FakeClock) -> None:
    store, broker = RenewingStore(), SlowBroker()
    leases = keeper(store, broker, clock)
    for _ in range(3):  # each beat answers at once, the extension still running
        assert await asyncio.wait_for(leases.heartbeat_once(), 1) is True
        await asyncio.sleep(0)
    assert store.renewals == 3
    assert broker.calls == 1  # one extension at a time: the others were skipped
    broker.answer.set()
    await asyncio.sleep(0)
    assert await leases.heartbeat_once()
    await asyncio.sleep(0)
    assert broker.calls == 2  # the next beat after it answered extends again
