"""The worker's intake, with an in-memory transport: claimed jobs reach the caller even when
deferring the others fails, and every message that is not held is acked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain.job import Lease
from jobgate.storage.protocol import Storage
from jobgate.storage.records import ClaimPolicy, TenantShare
from jobgate.testing import FakeClock
from jobgate.transports.base import Delivery
from jobgate.transports.intake import Intake
from tests.storage.helpers import make_tenant, new_job

pytestmark = pytest.mark.asyncio


class MemoryTransport:
    name = "memory"

    def __init__(self, job_ids: list[str]) -> None:
        self.waiting = [Delivery(job_id, 1, index) for index, job_id in enumerate(job_ids)]
        self.acked: list[str] = []

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def publish(self, job_ids: Sequence[str]) -> None: ...

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivery]:
        taken, self.waiting = self.waiting[:max_count], self.waiting[max_count:]
        return taken

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        self.acked += [d.job_id for d in deliveries]

    async def extend(self, deliveries: Sequence[Delivery], *, visibility_s: float) -> None: ...

    async def lag(self) -> int:
        return len(self.waiting)


class DeferFails:
    """The storage, except that deferring raises (the database went away just then)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    async def transport_defer(self, **_: object) -> None:
        raise errors.StorageUnavailable("gone")


async def test_claimed_jobs_survive_a_failed_defer(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage, "capped")
    ids = [
        (await storage.job_insert(job=new_job(tenant), now=clock.now())).job.id for _ in range(3)
    ]
    transport = MemoryTransport(ids)
    intake = Intake(
        storage=DeferFails(storage),
        transport=transport,
        settings=Settings(),
        clock=clock,
        worker_id="w",
    )
    policy = ClaimPolicy(tenants={tenant.id: TenantShare(max_running=1)})
    jobs = await intake.claim(count=3, providers=None, policy=policy)
    assert [job.id for job in jobs] == ids[:1]  # the cap: one; the others deferred (failed)
    assert sorted(transport.acked) == sorted(ids[1:])  # not held: acked at once
    assert jobs[0].lease_token is not None
    intake.finished(Lease(jobs[0].id, jobs[0].lease_token))
    await intake.drain()
    assert sorted(transport.acked) == sorted(ids)
