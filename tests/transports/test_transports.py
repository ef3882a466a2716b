"""Every transport against a real broker: jobs end exactly once with two workers; a
consumer that dies with unacked messages, a lost message, a flushed broker, a cancelled job and
a tenant's cap all keep their meaning. Parametrized over SQLite and PostgreSQL storage."""

from __future__ import annotations

import asyncio

import pytest

from jobgate import metrics
from jobgate.domain.states import JobState
from jobgate.testing import eventually
from jobgate.transports.base import Delivery
from tests.transports.conftest import LEASE_TTL_S, Cluster

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


# The broker's side of these runs is the same on both backends (the storage's side is in the
# contract suite): SQLite only, to keep the suite short.
broker_side_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _count(counter: object, *labels: str) -> float:
    return float(counter.labels(*labels)._value.get())  # type: ignore[attr-defined]


async def test_jobs_end_exactly_once_with_two_workers(cluster: Cluster) -> None:
    ids = await cluster.submit("acme", 60)
    await cluster.start_relay()
    await cluster.start_worker("w1")
    await cluster.start_worker("w2")
    await cluster.wait_terminal(ids)
    await cluster.assert_each_succeeded_once(ids)
    for job_id in ids:
        job = await cluster.storage.job_get(job_id=job_id)
        assert job is not None and job.run_count == 1  # never started twice
    # The relay reads the broker's lag on its next pass: all acked.
    await eventually(lambda: _count(metrics.TRANSPORT_LAG, cluster.broker.name) == 0)


async def test_a_consumer_that_dies_with_unacked_messages(cluster: Cluster) -> None:
    """A consumer received messages and claimed their jobs, then died: nothing is acked. The
    reaper takes the leases back, the broker (or the relay) delivers again, and each job ends
    once, on the surviving worker."""
    ids = await cluster.submit("acme", 6)
    relay = await cluster.start_relay()
    await relay.relay_once()
    dead = cluster.broker.transport("dead", claim_idle_s=LEASE_TTL_S)
    await dead.open()
    deliveries: list[Delivery] = []
    async with asyncio.timeout(10):
        while len(deliveries) < len(ids):
            deliveries += await dead.receive(max_count=len(ids), wait_s=0.2)
    claimed = await cluster.storage.job_claim_by_id(
        worker_id="dead", job_ids=[d.job_id for d in deliveries], lease_ttl_s=LEASE_TTL_S
    )
    assert len(claimed.claimed) == len(ids)
    # The dead consumer's messages stay unacked; its connection dies with it.
    await dead.close()
    await cluster.start_reaper()
    await cluster.start_worker("survivor")
    await cluster.wait_terminal(ids, timeout_s=30)
    await cluster.assert_each_succeeded_once(ids)
    for job_id in ids:
        job = await cluster.storage.job_get(job_id=job_id)
        assert job is not None and job.run_count == 2 and job.lease_owner != "dead"


@broker_side_only
async def test_unclaimed_messages_of_a_dead_consumer_are_redelivered(cluster: Cluster) -> None:
    """A consumer died between receiving and claiming: the broker hands its messages to
    another consumer (before the sweep would: the sweep is made slow here)."""
    cluster.runtime.settings = cluster.runtime.settings.model_copy(
        update={"transport_sweep_after_s": 300.0}
    )
    ids = await cluster.submit("acme", 4)
    relay = await cluster.start_relay()
    await relay.relay_once()
    dead = cluster.broker.transport("dead", claim_idle_s=LEASE_TTL_S)
    await dead.open()
    got: list[Delivery] = []
    async with asyncio.timeout(10):
        while len(got) < len(ids):
            got += await dead.receive(max_count=len(ids), wait_s=0.2)
    await dead.close()
    before = _count(metrics.TRANSPORT_REDELIVERIES, cluster.broker.name)
    await cluster.start_worker("survivor")
    await cluster.wait_terminal(ids, timeout_s=30)
    await cluster.assert_each_succeeded_once(ids)
    assert _count(metrics.TRANSPORT_REDELIVERIES, cluster.broker.name) > before


@broker_side_only
async def test_a_lost_message_is_found_by_the_sweep(cluster: Cluster) -> None:
    ids = await cluster.submit("acme", 5)
    relay = await cluster.start_relay()
    await relay.relay_once()  # published (here, or already by the running relay)
    await cluster.broker.lose_everything()
    before = _count(metrics.TRANSPORT_PUBLISHED, cluster.broker.name, "sweep")
    await cluster.start_worker("w1")
    await cluster.wait_terminal(ids, timeout_s=30)
    await cluster.assert_each_succeeded_once(ids)
    assert _count(metrics.TRANSPORT_PUBLISHED, cluster.broker.name, "sweep") > before


@broker_side_only
async def test_the_broker_flushed_and_connections_cut_mid_run(cluster: Cluster) -> None:
    ids = await cluster.submit("acme", 40, latency_s=0.2)  # 8 slots: a run of 1 s or more
    await cluster.start_relay()
    await cluster.start_reaper()
    await cluster.start_worker("w1", concurrency=4)
    await cluster.start_worker("w2", concurrency=4)

    async def finished() -> int:
        jobs = [await cluster.storage.job_get(job_id=job_id) for job_id in ids]
        return sum(1 for job in jobs if job is not None and job.state.terminal)

    async with asyncio.timeout(30):  # mid-run: once the first jobs ended (not after a guess)
        while await finished() < 8:  # noqa: ASYNC110 (the workers run on their own tasks)
            await asyncio.sleep(0.02)
    await cluster.broker.lose_everything()
    await cluster.broker.cut_connections()
    await cluster.wait_terminal(ids, timeout_s=45)
    await cluster.assert_each_succeeded_once(ids)


@broker_side_only
async def test_a_cancelled_jobs_message_is_dropped(cluster: Cluster) -> None:
    ids = await cluster.submit("acme", 3)
    relay = await cluster.start_relay()
    await relay.relay_once()
    owner = await cluster.storage.tenant_get(name="acme")
    assert owner is not None
    await cluster.runtime.jobs.cancel(tenant_id=owner.id, job_id=ids[0])
    before = _count(metrics.TRANSPORT_RECEIVED, cluster.broker.name, "dropped")
    await cluster.start_worker("w1")
    await cluster.wait_terminal(ids)
    job = await cluster.storage.job_get(job_id=ids[0])
    assert job is not None and job.state is JobState.CANCELLED and job.run_count == 0
    await cluster.assert_each_succeeded_once(ids[1:])
    # The drop is counted just after the other jobs' claims.
    await eventually(
        lambda: _count(metrics.TRANSPORT_RECEIVED, cluster.broker.name, "dropped") > before
    )


async def test_a_tenants_cap_holds(cluster: Cluster) -> None:
    ids = await cluster.submit("capped", 8, latency_s=0.3)
    others = await cluster.submit("acme", 8, latency_s=0.3)
    await cluster.start_relay()
    await cluster.start_worker("w1")
    await cluster.start_worker("w2")
    owner = await cluster.storage.tenant_get(name="capped")
    assert owner is not None
    peak = 0
    async with asyncio.timeout(40):
        while True:
            # One statement: a consistent snapshot of the tenant's running jobs.
            running = await cluster.storage.job_list(
                tenant_id=owner.id, states=[JobState.RUNNING], limit=100
            )
            peak = max(peak, len(running))
            jobs = [await cluster.storage.job_get(job_id=job_id) for job_id in ids]
            if all(job is not None and job.state.terminal for job in jobs):
                break
            await asyncio.sleep(0.02)
    assert 1 <= peak <= 2
    await cluster.wait_terminal(others)
    await cluster.assert_each_succeeded_once(ids + others)


async def test_a_flooding_tenant_does_not_starve_another(cluster: Cluster) -> None:
    """The window keeps the broker's backlog short and is filled by fair share: a tenant that
    submits later is not stuck behind another's whole backlog in the broker's FIFO."""
    cluster.runtime.settings = cluster.runtime.settings.model_copy(update={"transport_window": 4})
    flood = await cluster.submit("acme", 40, latency_s=0.05)
    await cluster.start_relay()
    await cluster.start_worker("w1", concurrency=2)
    await asyncio.sleep(0.2)
    small = await cluster.submit("small", 3, latency_s=0.05)
    await cluster.wait_terminal(small)
    jobs = [await cluster.storage.job_get(job_id=job_id) for job_id in flood]
    done = sum(1 for job in jobs if job is not None and job.state.terminal)
    assert done < 30, done  # FIFO behind the whole backlog would have run all 40 first
    await cluster.wait_terminal(flood)
    await cluster.assert_each_succeeded_once(flood + small)
