"""A claim that fails between receiving messages and holding (or acking) them gives the messages
back to the broker at once, on every transport: a database error during a claim by id never
leaves a RabbitMQ consumer without credit (its prefetch), nor Redis or SQS messages hidden until
their idle or visibility time. A consumer left without credit while work waits is reported
(jobgate_transport_stalled, /readyz, a warning) and gets back what no job of its holds."""

from __future__ import annotations

import asyncio
import logging
import urllib.parse

import pytest

from jobgate import errors, metrics
from jobgate.clock import SystemClock
from jobgate.domain.job import Job, Lease
from jobgate.process.runtime import Runtime
from jobgate.roles.intake import Intake
from jobgate.roles.worker import Worker
from jobgate.services.limits import LimitsService
from jobgate.storage.postgres.store import is_postgres, postgres_store
from jobgate.storage.protocol import Storage
from jobgate.testing import eventually
from jobgate.transports import status
from jobgate.transports.base import Delivery, Transport
from tests.support.faults import FaultyStorage
from tests.support.proxy import TcpProxy
from tests.transports.conftest import LEASE_TTL_S, Cluster

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

# Redis's reclaim after idleness and SQS's visibility timeout, far beyond every deadline here:
# a message that comes back in time was given back, not timed out.
IDLE_S = 120.0
PREFETCH = 8  # the test brokers' RabbitMQ prefetch (tests/transports/amqp_broker.py)
OUTAGE_S = 5.0

broker_side_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
on_postgres = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def _count(counter: object, *labels: str) -> float:
    return float(counter.labels(*labels)._value.get())  # type: ignore[attr-defined]


def _credit(worker: Worker) -> str:
    intake = worker._intake
    assert intake is not None
    transport = intake.transport
    outstanding = len(transport.outstanding())
    return f"credit {transport.credit()}, outstanding {outstanding}, held {intake._held}"


async def _published(cluster: Cluster, count: int, **submit: float) -> list[str]:
    ids = await cluster.submit("acme", count, **submit)
    publisher = cluster.broker.transport("publisher", claim_idle_s=IDLE_S)
    await publisher.open()
    await publisher.publish(ids)
    return ids


async def _consumer(cluster: Cluster, storage: Storage) -> tuple[Transport, Intake]:
    transport = cluster.broker.transport("consumer", claim_idle_s=IDLE_S)
    await transport.open()
    intake = Intake(
        storage=storage,
        transport=transport,
        settings=cluster.runtime.settings,
        clock=SystemClock(),
        worker_id="consumer",
    )
    return transport, intake


async def _claim_all(intake: Intake, ids: list[str], *, timeout_s: float = 10.0) -> None:
    """Claim every job of `ids` through `intake`, finishing (acking) none."""
    claimed: list[str] = []
    try:
        async with asyncio.timeout(timeout_s):
            while len(claimed) < len(ids):
                jobs = await intake.claim(count=PREFETCH, providers=None, policy=None)
                claimed += [job.id for job in jobs]
    except TimeoutError:
        raise AssertionError(f"{len(claimed)} of {len(ids)} claimed in {timeout_s} s") from None
    assert sorted(claimed) == sorted(ids)


@broker_side_only
async def test_a_failed_claim_gives_its_messages_back(cluster: Cluster) -> None:
    ids = await _published(cluster, PREFETCH)
    faulty = FaultyStorage(cluster.storage)
    _, intake = await _consumer(cluster, faulty)
    name = cluster.broker.name
    before = _count(metrics.TRANSPORT_RECEIVED, name, "returned")
    faulty.fail("job_claim_by_id")
    with pytest.raises(errors.StorageUnavailable):
        async with asyncio.timeout(10):
            while True:  # until a receive brought messages and their claim failed
                assert await intake.claim(count=PREFETCH, providers=None, policy=None) == []
    # Back at once: RabbitMQ's credit is free again, Redis and SQS hand them out again now.
    await _claim_all(intake, ids)
    assert _count(metrics.TRANSPORT_RECEIVED, name, "returned") > before


@broker_side_only
@pytest.mark.parametrize("broker", ["amqp"], indirect=True)
async def test_a_consumer_without_credit_while_work_waits_is_reported_and_recovers(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Deliveries taken and then lost by the worker's own code (as a failed claim lost them)
    use up the consumer's credit: RabbitMQ sends it nothing more. Within a lease it is
    reported and the lost deliveries are given back; the jobs then run."""
    ids = await _published(cluster, PREFETCH + 4)
    transport, intake = await _consumer(cluster, cluster.storage)
    lost: list[Delivery] = []
    async with asyncio.timeout(10):
        while len(lost) < PREFETCH:
            lost += await transport.receive(max_count=PREFETCH - len(lost), wait_s=0.2)
    assert transport.credit() == 0
    stalled = metrics.TRANSPORT_STALLED.labels("amqp")
    with caplog.at_level(logging.WARNING, logger="jobgate.transports.stall"):
        async with asyncio.timeout(LEASE_TTL_S + 5):
            while stalled._value.get() == 0:
                assert await intake.claim(count=PREFETCH, providers=None, policy=None) == []
    assert "transport_stalled" in status.warnings()
    reported = [r for r in caplog.records if "no credit left" in r.getMessage()]
    assert len(reported) == 1, caplog.records
    # What it lost came back: its credit goes to jobs now, and to the rest once they end.
    claimed: list[Job] = []
    async with asyncio.timeout(10):
        while len(claimed) < PREFETCH:
            claimed += await intake.claim(count=PREFETCH, providers=None, policy=None)
    assert stalled._value.get() == 0
    assert "transport_stalled" not in status.warnings()
    for job in claimed:
        intake.finished(Lease(job.id, job.lease_token or ""))
    await intake.drain()
    await _claim_all(intake, sorted(set(ids) - {job.id for job in claimed}))


@on_postgres
async def test_jobs_succeed_after_a_database_outage_without_a_restart(cluster: Cluster) -> None:
    """The worker reaches PostgreSQL through a proxy that cuts its link for a few seconds
    while messages are delivered; the relay and the reaper keep theirs. Once the link is back
    every job succeeds, without restarting anything."""
    direct = cluster.storage
    assert is_postgres(direct)
    url = urllib.parse.urlsplit(direct.engine.dsn)
    with TcpProxy((url.hostname or "127.0.0.1", url.port or 5432)) as proxy:
        userinfo = url.netloc.rpartition("@")[0]
        netloc = (f"{userinfo}@" if userinfo else "") + f"127.0.0.1:{proxy.port}"
        cut_off = postgres_store(urllib.parse.urlunsplit(url._replace(netloc=netloc)))
        await cut_off.open()
        try:
            worker_runtime = Runtime(cluster.runtime.settings, storage=cut_off)
            # The tenants' limits as read before the outage stay cached through it (as they
            # do for up to 2 s by default): each claim in the outage reaches the broker.
            worker_runtime.limits = LimitsService(
                storage=cut_off, settings=worker_runtime.settings, clock=SystemClock(),
                refresh_s=3600,
            )  # fmt: skip
            ids = await cluster.submit("acme", 24, latency_s=0.2)
            await cluster.start_relay()
            await cluster.start_reaper()
            await cluster.start_worker("w", concurrency=PREFETCH, runtime=worker_runtime)

            async def under_way() -> bool:  # the first jobs ended: messages flow
                jobs = [await direct.job_get(job_id=job_id) for job_id in ids]
                return sum(1 for job in jobs if job is not None and job.state.terminal) >= 4

            await eventually(under_way, what="the first jobs to end")
            proxy.reset()  # every connection reset, new ones refused
            await asyncio.sleep(OUTAGE_S)  # the outage lasts this long, whatever happens in it
            proxy.heal()
            await cluster.wait_terminal(ids, timeout_s=30)
            await cluster.assert_each_succeeded_once(ids)
            # Its consumer may have been reported stalled during the outage (messages waited
            # while its credit went to jobs whose verdicts could not be written); not now.
            try:
                await eventually(
                    lambda: _count(metrics.TRANSPORT_STALLED, cluster.broker.name) == 0,
                    timeout_s=10,
                )
            except AssertionError:
                raise AssertionError(f"still stalled: {_credit(cluster.workers[0])}") from None
        finally:
            await cluster.stop()
            await worker_runtime.providers.aclose()
            await cut_off.close()
