"""A small jobgate cluster in one event loop per test: real storage (SQLite or PostgreSQL) on
the real clock, a real broker, a relay, a reaper and as many workers as a test starts, each
worker with its own broker client (as separate worker processes would have)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobgate.config import Settings, TenantLimits
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.roles.relay import Relay
from jobgate.roles.worker import Worker
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.transports import status
from tests.support.databases import PostgresTemplate
from tests.transports.brokers import Broker, open_broker

CHAT = "/v1/chat/completions"
LEASE_TTL_S = 2.0


@pytest.fixture(autouse=True)
def transport_status() -> Iterator[None]:
    """This process's broker status (up, falling back, stalled) is the test's own."""
    status.reset()
    yield
    status.reset()


@pytest.fixture(params=["redis", "amqp", "sqs"])
async def broker(request: pytest.FixtureRequest) -> AsyncIterator[Broker]:
    made = open_broker(request.param)
    yield made
    await made.cleanup()


@pytest.fixture
async def real_storage(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Storage]:
    """Storage on the real clock: relays, sweeps and reapers act on their own here."""
    if backend == "sqlite":
        store: Storage = sqlite_store(str(tmp_path / "jobgate.db"))
        await store.open()
        await store.migrate()
        yield store
        await store.close()
        return
    template: PostgresTemplate = request.getfixturevalue("pg_template")
    dsn = await template.clone()
    store = postgres_store(dsn, pool_size=6)
    await store.open()
    yield store
    await store.close()
    await template.drop_clone(dsn)


def transport_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": "sqlite:///unused.db",
        "lease_ttl_s": LEASE_TTL_S,
        "heartbeat_interval_s": 0.5,
        "worker_poll_interval_s": 0.2,
        "reaper_interval_s": 0.3,
        "retry_base_s": 0.05,
        "retry_max_s": 0.05,
        "shutdown_grace_s": 0,
        "transport": "redis://unused",  # the tests hand each worker its transport
        "transport_sweep_after_s": 1.0,
        "transport_defer_s": 0.2,
        "tenants": {"capped": TenantLimits(max_running=2)},
    }
    values.update(overrides)
    return Settings(**values)


@dataclasses.dataclass
class Cluster:
    runtime: Runtime
    broker: Broker
    tasks: list[asyncio.Task[None]] = dataclasses.field(default_factory=list)
    workers: list[Worker] = dataclasses.field(default_factory=list)
    relay: Relay | None = None

    @property
    def storage(self) -> Storage:
        return self.runtime.storage

    async def start_relay(self) -> Relay:
        transport = self.broker.transport("relay", claim_idle_s=LEASE_TTL_S)
        await transport.open()
        self.relay = Relay(
            storage=self.storage,
            transport=transport,
            settings=self.runtime.settings,
            limits=self.runtime.limits,
        )
        self.tasks.append(asyncio.create_task(self.relay.run(), name="relay"))
        return self.relay

    async def start_reaper(self) -> None:
        reaper = self.runtime.reaper()
        self.tasks.append(asyncio.create_task(reaper.run(), name="reaper"))
        self._stoppers.append(reaper.request_stop)

    async def start_worker(
        self, name: str, *, concurrency: int = 8, runtime: Runtime | None = None
    ) -> Worker:
        """A worker with a broker client of its own, on `runtime` (default: the cluster's; a
        test gives one whose storage reaches the database through a proxy)."""
        transport = self.broker.transport(name, claim_idle_s=LEASE_TTL_S)
        await transport.open()
        worker = (runtime or self.runtime).worker(
            concurrency=concurrency,
            worker_id=name,
            transport=transport,
            on_claimed=None if self.relay is None else self.relay.wake,
        )
        self.workers.append(worker)
        self.tasks.append(asyncio.create_task(worker.run(), name=name))
        return worker

    async def submit(self, tenant_name: str, count: int, *, latency_s: float = 0.0) -> list[str]:
        owner = await self.runtime.storage.tenant_get(name=tenant_name)
        if owner is None:
            owner = (await self.runtime.tenants.create(tenant_name)).tenant
        ids = []
        for i in range(count):
            body: dict[str, Any] = {
                "model": "sim-echo",
                "messages": [{"role": "user", "content": f"job {i}"}],
            }
            if latency_s:
                body["sim"] = {"latency_s": latency_s}
            outcome = await self.runtime.jobs.submit(
                tenant_id=owner.id, spec=SubmitSpec(endpoint=CHAT, body=body, provider="sim")
            )
            ids.append(outcome.job.id)
        return ids

    async def wait_terminal(self, ids: list[str], *, timeout_s: float = 30.0) -> None:
        """Until every job of `ids` is terminal. A role's task that ended with an error fails
        it at once with that error, and a timeout names what was left and where."""
        pending = set(ids)
        try:
            async with asyncio.timeout(timeout_s):
                while pending:
                    self._assert_roles_alive()
                    for job_id in list(pending):
                        job = await self.storage.job_get(job_id=job_id)
                        assert job is not None
                        if job.state.terminal:
                            pending.discard(job_id)
                    if pending:
                        await asyncio.sleep(0.05)
        except TimeoutError:
            where = await self._where(pending)
            raise AssertionError(
                f"{len(pending)} not terminal after {timeout_s} s: {where}"
            ) from None

    def _assert_roles_alive(self) -> None:
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise AssertionError(f"{task.get_name()} ended") from task.exception()

    async def _where(self, job_ids: set[str]) -> str:
        """The jobs' states and leases, each role task's state, each worker's broker outage.
        Each state twice: by job_get and by job_list (on SQLite the first is read inline on
        this thread's connection, the second on a reader thread's: a difference is a stale
        read)."""
        jobs = [await self.storage.job_get(job_id=job_id) for job_id in sorted(job_ids)]
        listed = {
            job.id: str(job.state)
            for tenant_id in {job.tenant_id for job in jobs if job is not None}
            for job in await self.storage.job_list(tenant_id=tenant_id, limit=10_000)
        }
        states = [
            (job.id, str(job.state), listed.get(job.id), job.attempt, job.lease_owner)
            for job in jobs
            if job is not None
        ]
        roles = [(task.get_name(), "done" if task.done() else "running") for task in self.tasks]
        outages = [
            (worker.worker_id, worker._intake is not None and worker._intake.broker_down)
            for worker in self.workers
        ]
        return f"jobs {states}; roles {roles}; broker down {outages}"

    async def assert_each_succeeded_once(self, ids: list[str]) -> None:
        for job_id in ids:
            job = await self.storage.job_get(job_id=job_id)
            assert job is not None and job.state is JobState.SUCCEEDED, job
            events = await self.storage.job_events(job_id=job_id)
            finished = [e for e in events if e.applied and e.to_state is JobState.SUCCEEDED]
            assert len(finished) == 1, events

    async def stop(self) -> None:
        for worker in self.workers:
            worker.request_stop()
        if self.relay is not None:
            self.relay.request_stop()
        for stop in self._stoppers:
            stop()
        for task in self.tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
        for worker in self.workers:
            intake = worker._intake
            if intake is not None:
                await intake.transport.close()

    def __post_init__(self) -> None:
        self._stoppers: list[Any] = []


@pytest.fixture
async def cluster(real_storage: Storage, broker: Broker) -> AsyncIterator[Cluster]:
    runtime = Runtime(transport_settings(), storage=real_storage)
    made = Cluster(runtime, broker)
    yield made
    await made.stop()
    await runtime.providers.aclose()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from tests.transports import sqs_broker

    sqs_broker.stop_moto()
