"""The worker's intake, with an in-memory transport: claimed jobs reach the caller even when
deferring the others fails, every message that is not held is acked, a failed claim gives its
messages back, a message that names no job is acked as garbage, and a consumer left without
credit while work waits is reported and gets back what it lost."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from jobgate import errors, metrics
from jobgate.config import Settings
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.roles.intake import Intake
from jobgate.storage.protocol import Storage
from jobgate.storage.records import ClaimPolicy, TenantShare
from jobgate.testing import FakeClock
from jobgate.transports import status
from jobgate.transports.base import Delivery
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.support.faults import FaultyStorage

pytestmark = pytest.mark.asyncio

LEASE_TTL_S = 30.0


class MemoryTransport:
    """A broker in memory; with `credit`, one that bounds the unsettled deliveries of its
    consumer as RabbitMQ's prefetch does."""

    name = "memory"

    def __init__(self, job_ids: list[str], *, credit: int | None = None) -> None:
        self.waiting = [Delivery(job_id, 1, object()) for job_id in job_ids]
        self.acked: list[str] = []
        self.released: list[str] = []
        self.unsettled: list[Delivery] = []
        self._credit = credit

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def publish(self, job_ids: Sequence[str]) -> None: ...

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivery]:
        credit = self.credit()
        count = max_count if credit is None else min(max_count, credit)
        taken, self.waiting = self.waiting[:count], self.waiting[count:]
        self.unsettled += taken
        return taken

    def _settle(self, deliveries: Sequence[Delivery]) -> None:
        self.unsettled = [d for d in self.unsettled if d not in deliveries]

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        self._settle(deliveries)
        self.acked += [d.job_id for d in deliveries]

    async def release(self, deliveries: Sequence[Delivery]) -> None:
        self._settle(deliveries)
        self.released += [d.job_id for d in deliveries]
        again = [Delivery(d.job_id, d.delivery_count + 1, object()) for d in deliveries]
        self.waiting = again + self.waiting

    def credit(self) -> int | None:
        return None if self._credit is None else max(0, self._credit - len(self.unsettled))

    def outstanding(self) -> list[Delivery]:
        return list(self.unsettled) if self._credit is not None else []

    async def extend(self, deliveries: Sequence[Delivery], *, visibility_s: float) -> None: ...

    async def lag(self) -> int:
        return len(self.waiting)


def _intake(storage: Any, transport: MemoryTransport, clock: FakeClock) -> Intake:
    return Intake(
        storage=storage,
        transport=transport,
        settings=Settings(lease_ttl_s=LEASE_TTL_S),
        clock=clock,
        worker_id="w",
    )


async def _queued(storage: Storage, clock: FakeClock, count: int) -> list[str]:
    tenant = await make_tenant(storage, "acme")
    return [
        (await submit_one(storage, job=new_job(tenant), now=clock.now())).job.id
        for _ in range(count)
    ]


def _count(outcome: str) -> float:
    return float(metrics.TRANSPORT_RECEIVED.labels("memory", outcome)._value.get())


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
        (await submit_one(storage, job=new_job(tenant), now=clock.now())).job.id for _ in range(3)
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


async def test_a_failed_claim_gives_its_messages_back(storage: Storage, clock: FakeClock) -> None:
    ids = await _queued(storage, clock, 3)
    transport = MemoryTransport(ids)
    faulty = FaultyStorage(storage)
    intake = _intake(faulty, transport, clock)
    returned = _count("returned")
    faulty.fail("job_claim_by_id")
    with pytest.raises(errors.StorageUnavailable):
        await intake.claim(count=3, providers=None, policy=None)
    assert sorted(transport.released) == sorted(ids) and transport.acked == []
    assert _count("returned") == returned + 3
    jobs = await intake.claim(count=3, providers=None, policy=None)
    assert sorted(job.id for job in jobs) == sorted(ids)


async def test_a_claim_whose_reply_was_lost_gives_its_messages_back(
    storage: Storage, clock: FakeClock
) -> None:
    """The claim committed, its answer never came: the messages go back, come again and are
    dropped (the jobs run under leases nobody holds, the reaper's once they run out)."""
    ids = await _queued(storage, clock, 2)
    transport = MemoryTransport(ids)
    faulty = FaultyStorage(storage)
    intake = _intake(faulty, transport, clock)
    faulty.lose_reply("job_claim_by_id")
    with pytest.raises(errors.StorageUnavailable):
        await intake.claim(count=2, providers=None, policy=None)
    assert sorted(transport.released) == sorted(ids)
    assert await intake.claim(count=2, providers=None, policy=None) == []
    assert sorted(transport.acked) == sorted(ids)  # dropped: running already
    for job_id in ids:
        job = await storage.job_get(job_id=job_id)
        assert job is not None and job.state is JobState.RUNNING


MALFORMED = ["", "job_1\x00", "\ufffd\ufffd", "job_" + "a" * 200, "job 1", "../job_1"]


async def test_messages_that_name_no_job_are_acked_counted_and_logged_once(
    storage: Storage, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await _queued(storage, clock, 2)
    transport = MemoryTransport([MALFORMED[0], ids[0], *MALFORMED[1:], ids[1]])
    intake = _intake(storage, transport, clock)
    malformed = _count("malformed")
    with caplog.at_level(logging.WARNING, logger="jobgate.roles.intake"):
        jobs = await intake.claim(count=20, providers=None, policy=None)
        assert await intake.claim(count=20, providers=None, policy=None) == []
    assert sorted(job.id for job in jobs) == sorted(ids)
    assert sorted(transport.acked) == sorted(MALFORMED)
    assert _count("malformed") == malformed + len(MALFORMED)
    logged = [r for r in caplog.records if "name no job" in r.getMessage()]
    assert len(logged) == 1 and getattr(logged[0], "count", None) == len(MALFORMED)
    assert "\x00" not in getattr(logged[0], "sample", "\x00")


async def test_no_credit_while_work_waits_is_reported_and_what_was_lost_given_back(
    storage: Storage, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await _queued(storage, clock, 4)
    transport = MemoryTransport(ids, credit=2)
    intake = _intake(storage, transport, clock)
    lost = await transport.receive(max_count=2, wait_s=0)  # taken, and lost on the way
    stalled = metrics.TRANSPORT_STALLED.labels("memory")
    with caplog.at_level(logging.INFO, logger="jobgate.transports.stall"):
        assert await intake.claim(count=2, providers=None, policy=None) == []
        clock.advance(LEASE_TTL_S - 1)  # a delivery may be unsettled this long legitimately
        assert await intake.claim(count=2, providers=None, policy=None) == []
        assert stalled._value.get() == 0 and status.warnings() == []
        clock.advance(1)
        assert await intake.claim(count=2, providers=None, policy=None) == []
        assert stalled._value.get() == 1
        assert status.warnings() == ["transport_stalled"]
        assert sorted(transport.released) == sorted(d.job_id for d in lost)
        jobs = await intake.claim(count=2, providers=None, policy=None)
        assert stalled._value.get() == 0 and status.warnings() == []
    assert len(jobs) == 2
    messages = [r.getMessage() for r in caplog.records if r.name == "jobgate.transports.stall"]
    assert messages == [
        "the consumer has no credit left while messages wait",
        "the consumer has credit again",
    ]


async def test_credit_held_by_running_jobs_is_never_given_back(
    storage: Storage, clock: FakeClock
) -> None:
    """No credit because the worker's jobs hold it: reported only while messages wait, and
    nothing of it is released (a release would requeue a running job's message)."""
    ids = await _queued(storage, clock, 3)
    transport = MemoryTransport(ids, credit=2)
    intake = _intake(storage, transport, clock)
    jobs = await intake.claim(count=2, providers=None, policy=None)
    assert len(jobs) == 2
    for _ in range(3):
        clock.advance(LEASE_TTL_S)
        assert await intake.claim(count=2, providers=None, policy=None) == []
    assert transport.released == [] and status.warnings() == ["transport_stalled"]
    intake.finished(Lease(jobs[0].id, jobs[0].lease_token or ""))
    await intake.drain()
    assert [job.id for job in await intake.claim(count=2, providers=None, policy=None)] == ids[2:]
    assert status.warnings() == []
    transport.waiting = []  # nothing waits: no credit is no stall
    for _ in range(3):
        clock.advance(LEASE_TTL_S)
        assert await intake.claim(count=2, providers=None, policy=None) == []
    assert status.warnings() == []
