"""Hundreds of long calls in one worker on PostgreSQL: the pool does not grow with them (claims,
heartbeats and finishes are batched), and a slow database link never costs a lease of a call
that is still running. Real time: the sim provider sleeps, heartbeats tick."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.roles.worker import Worker
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.postgres.store import PostgresStore, postgres_store
from jobgate.testing import PacedClock
from tests.support.proxy import TcpProxy

pytestmark = pytest.mark.postgres

CHAT = "/v1/chat/completions"


def _spec(index: int, latency_s: float) -> SubmitSpec:
    body = {
        "model": "sim-echo",
        "messages": [{"role": "user", "content": f"call {index}"}],
        "sim": {"latency_s": latency_s},
    }
    return SubmitSpec(endpoint=CHAT, body=body)


class Counted:
    """Counts the storage calls a worker makes (and the leases each heartbeat carries)."""

    def __init__(self, storage: PostgresStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: collections.Counter[str] = collections.Counter()
        self.heartbeat_sizes: list[int] = []
        self.seconds: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
        for name in ("job_claim", "job_heartbeat", "job_finish_many"):
            monkeypatch.setattr(storage, name, self._wrap(name, getattr(storage, name)))

    def _wrap(
        self, name: str, method: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        async def counted(**kwargs: Any) -> Any:
            self.calls[name] += 1
            if name == "job_heartbeat":
                self.heartbeat_sizes.append(len(kwargs["leases"]))
            started = time.monotonic()
            try:
                return await method(**kwargs)
            finally:
                self.seconds[name].append(round(time.monotonic() - started, 2))

        return counted


async def _states(dsn: str) -> dict[str, int]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT state, count(*) AS n FROM jobs GROUP BY state")
        return {row["state"]: int(row["n"]) for row in rows}
    finally:
        await conn.close()


async def _until(
    check: Callable[[], Awaitable[bool]], *, timeout_s: float, interval_s: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(interval_s)


@pytest.fixture
async def direct(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    store = postgres_store(pg_dsn, pool_size=2)
    await store.open()
    yield store
    await store.close()


async def test_hundreds_in_flight_on_a_pool_of_two_connections(
    pg_dsn: str,
    direct: PostgresStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs, latency_s = 300, 1.0
    settings = Settings(
        database_url=pg_dsn, database_pool_size=2, lease_ttl_s=4, heartbeat_interval_s=1
    )
    assert settings.worker_concurrency >= jobs  # the default, not a tuned number
    # Every call waits until all of them are running (however long a loaded machine takes to
    # claim them), then answers after latency_s; meanwhile heartbeats keep their leases.
    pace = PacedClock(allowed=0)
    providers = ProviderRegistry.from_settings(settings, clock=pace)
    runtime = Runtime(settings, storage=direct, providers=providers)
    tenant = (await runtime.tenants.create("acme")).tenant
    await runtime.jobs.submit_many(
        tenant_id=tenant.id, specs=[_spec(i, latency_s) for i in range(jobs)]
    )
    counted = Counted(direct, monkeypatch)
    worker = runtime.worker()
    peak = 0
    database = pg_dsn.rsplit("/", 1)[1]
    connections: list[int] = []

    async def all_running() -> bool:
        nonlocal peak
        peak = max(peak, worker.inflight)
        return (await _states(pg_dsn)).get("running", 0) == jobs

    with caplog.at_level(logging.WARNING, logger="jobgate"):
        started = time.monotonic()
        loop = asyncio.create_task(worker.run())
        try:
            await _until(all_running, timeout_s=60)
            conn = await asyncpg.connect(pg_dsn)
            try:
                connections.append(
                    await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE datname = $1 AND application_name = 'jobgate'",
                        database,
                    )
                )
            finally:
                await conn.close()
            assert (await _states(pg_dsn)).get("running", 0) == jobs  # none answered yet
            pace.run_free()

            async def all_done() -> bool:
                return (await _states(pg_dsn)).get("succeeded", 0) == jobs

            await _until(all_done, timeout_s=60)
            elapsed_s = time.monotonic() - started
        finally:
            worker.request_stop()
            await asyncio.wait_for(loop, 30)
    assert await _states(pg_dsn) == {"succeeded": jobs}
    # Every call ran once, all at the same time, over two connections (the pool's cap).
    pool = direct.engine.executor._pool
    assert pool is not None and pool.get_max_size() == 2
    assert connections[0] <= 2, connections
    # Batched: a few claims, one heartbeat statement per interval carrying every lease, and
    # finishes grouped while one is in flight.
    assert counted.calls["job_claim"] <= 10, counted.calls
    assert max(counted.heartbeat_sizes) == jobs
    assert counted.calls["job_heartbeat"] <= elapsed_s / settings.heartbeat_interval_s + 1
    assert counted.calls["job_finish_many"] <= jobs / 10, counted.calls
    # No storage call waited so long for a connection that it failed.
    assert "heartbeat failed" not in caplog.text and "claim failed" not in caplog.text
    assert "could not record" not in caplog.text


# About 20 s (calls must outlast a lease on a link of 1.5 s round trips), and in CI: no other
# test has a renewal slower than its interval.
async def test_a_heartbeat_slower_than_its_interval_keeps_every_lease_postgres(
    pg_dsn: str, direct: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each renewal takes longer than the heartbeat interval (a slow database link): it is
    waited for, not cancelled, so the leases of the calls still running are renewed, no job
    is reclaimed and every call's result is written by the worker that made it."""
    jobs, latency_s, delay_s = 20, 9.0, 0.75  # a round trip: 1.5 s; the interval: 1 s
    settings = Settings(
        database_url=pg_dsn,
        lease_ttl_s=8,  # calls stop 7 s after their last renewal was sent
        heartbeat_interval_s=1,
        worker_poll_interval_s=30,
        retry_base_s=30,
        retry_max_s=30,
    )
    setup = Runtime(settings, storage=direct)
    tenant = (await setup.tenants.create("acme")).tenant
    host, port = "127.0.0.1", int(pg_dsn.rsplit(":", 1)[1].split("/", 1)[0])
    with TcpProxy((host, port)) as proxy:
        slow = postgres_store(
            pg_dsn.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}"), pool_size=1
        )
        await slow.open()  # connected (and its types set up) before the link slows down
        worker = Worker(
            storage=slow,
            providers=setup.providers,
            settings=settings,
            concurrency=jobs,
            worker_id="slow-link",
        )
        reaper = setup.reaper()
        reaped: list[str] = []
        try:
            # One quick job first, so that the statements are prepared on the connection: on
            # the slow link each is then one round trip.
            await setup.jobs.submit_many(tenant_id=tenant.id, specs=[_spec(-1, 0)])
            [warm] = await worker.run_once()
            assert warm is not None and warm.state is JobState.SUCCEEDED
            await slow.job_heartbeat(leases=[Lease(warm.id, "stale")], lease_ttl_s=8)
            await setup.jobs.submit_many(
                tenant_id=tenant.id, specs=[_spec(i, latency_s) for i in range(jobs)]
            )
            counted = Counted(slow, monkeypatch)
            proxy.delay(delay_s)
            loop = asyncio.create_task(worker.run())

            async def settled() -> bool:
                passed = await reaper.reap_once()  # the database's clock: expired leases
                reaped.extend(passed.reaped.requeued + passed.reaped.failed)
                return (await _states(pg_dsn)).get("succeeded", 0) == jobs + 1

            try:
                await _until(settled, timeout_s=latency_s + 30, interval_s=0.5)
            finally:
                print(dict(counted.seconds))
                worker.request_stop()
                await asyncio.wait_for(loop, 60)
        finally:
            await slow.close()
    assert reaped == []
    assert await _states(pg_dsn) == {"succeeded": jobs + 1}
    for job in await direct.job_list(tenant_id=tenant.id, limit=100):
        assert job.state is JobState.SUCCEEDED and job.attempt == 1, (job.id, job.attempt)
        assert job.lease_owner in (None, "slow-link")
    # The renewals really were slower than the interval, and stayed one at a time.
    assert counted.calls["job_heartbeat"] >= 3
    assert counted.calls["job_heartbeat"] <= (latency_s + 10) / (2 * delay_s) + 1


async def test_one_heartbeat_renews_thousands_of_leases_in_well_under_its_interval_postgres(
    pg_dsn: str, direct: PostgresStore
) -> None:
    """A worker holding thousands of calls renews them in one statement whose cost is linear
    in the leases: the job trigger's join of its transition tables was a nested loop cached
    from the first small claims (migration 0013), and at 10,000 leases a renewal outlasted
    the lease."""
    calls = 4000
    settings = Settings(
        database_url=pg_dsn,
        worker_concurrency=calls,
        shutdown_grace_s=0,
        providers={"sim": ProviderConfig(kind="sim", model_prefixes=("sim-",), concurrency=calls)},
    )
    runtime = Runtime(settings)  # its own pool and LISTEN connection, as `jobgate worker`
    await runtime.open(migrate=False)
    await runtime.storage.listen()
    worker = runtime.worker()
    loop = asyncio.create_task(worker.run())
    try:
        submitter = Runtime(settings, storage=direct)
        tenant = (await submitter.tenants.create("acme")).tenant
        for start in range(0, calls, 500):  # claimed as they arrive, in claims of all sizes
            await submitter.jobs.submit_many(
                tenant_id=tenant.id, specs=[_spec(start + i, 120) for i in range(500)]
            )

        async def all_in_flight() -> bool:
            return worker.inflight == calls

        await _until(all_in_flight, timeout_s=60)
        started = time.monotonic()
        assert await worker.heartbeat_once()
        renewal_s = time.monotonic() - started
        assert renewal_s < 2.5, f"renewing {calls} leases took {renewal_s:.1f} s"
    finally:
        worker.request_stop()
        await asyncio.wait_for(loop, 60)
        await runtime.close()
