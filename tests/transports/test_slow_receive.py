"""A claim by id runs its leases from the moment the claim was sent, not from before the
receive that waited for the broker: counted from there, a slow broker (an overloaded SQS
endpoint answering a receive in seconds) made every lease look about to expire at once, so
the worker stopped each call it had just claimed and the queue only grew. Both stores."""

from __future__ import annotations

import pytest

from jobgate.config import ProviderConfig, Settings
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.roles.worker import Worker
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from jobgate.transports.base import Delivery
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.transports.test_intake import MemoryTransport

pytestmark = pytest.mark.asyncio

LEASE_TTL_S = 5.0


class SlowBroker(MemoryTransport):
    """Each receive takes `wait_s` of the clock before it answers."""

    def __init__(self, job_ids: list[str], clock: FakeClock, wait_s: float) -> None:
        super().__init__(job_ids)
        self._clock = clock
        self._wait_s = wait_s

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivery]:
        self._clock.advance(self._wait_s)
        return await super().receive(max_count=max_count, wait_s=wait_s)


async def test_a_slow_receive_leaves_the_claimed_leases_whole(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    ids = [(await submit_one(storage, job=new_job(tenant), now=clock.now())).job.id]
    settings = Settings(lease_ttl_s=LEASE_TTL_S, heartbeat_interval_s=1)
    worker = Worker(
        storage=storage,
        providers=ProviderRegistry(
            {"sim": SimProvider("sim", clock=clock)},
            configs={"sim": ProviderConfig(kind="sim")},
            default="sim",
        ),
        settings=settings,
        clock=clock,
        worker_id="w",
        transport=SlowBroker(ids, clock, wait_s=LEASE_TTL_S - 0.5),
    )
    [job] = await worker.claim()
    worker.check_lease_expiry()  # the first tick after the claim
    [held] = worker.held_leases()
    assert held.job_id == job.id
    assert worker._inflight[job.id].abort_reason is None  # its call goes on
