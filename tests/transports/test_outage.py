"""A broker outage, per `transport_fallback` (docs/transports.md): `database` keeps claiming
from the job table (logged, counted and shown by /readyz while it lasts); `fail` claims nothing
and fails /readyz until the broker is back."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from jobgate import errors, metrics, transports
from jobgate.config import Settings, load_settings
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.roles import intake
from jobgate.services.jobs import SubmitSpec
from jobgate.testing import FakeClock, eventually
from jobgate.transports import status
from jobgate.transports.base import TransportUnavailable
from jobgate.transports.redis_streams import RedisStreamsTransport
from jobgate.transports.sqs import parse_url
from tests.api_server import Api
from tests.support.proxy import TcpProxy

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens once the probe is closed


DOWN_URL = f"redis://127.0.0.1:{_closed_port()}/0"


@pytest.fixture(params=["database", "fail"])
def fallback(request: pytest.FixtureRequest) -> Iterator[str]:
    yield str(request.param)
    status.mark("redis", up=True)


@pytest.fixture
def settings(fallback: str) -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        lease_ttl_s=5,
        heartbeat_interval_s=1,
        worker_poll_interval_s=0.1,
        shutdown_grace_s=0,
        transport=DOWN_URL,
        transport_fallback=fallback,
    )


async def _submit(runtime: Runtime, count: int) -> tuple[str, list[str]]:
    owner = (await runtime.tenants.create("acme")).tenant
    ids = []
    for i in range(count):
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": str(i)}]}
        outcome = await runtime.jobs.submit(
            tenant_id=owner.id, spec=SubmitSpec(endpoint="/v1/chat/completions", body=body)
        )
        ids.append(outcome.job.id)
    return owner.id, ids


def _fallbacks() -> float:
    return float(metrics.TRANSPORT_FALLBACKS.labels("redis")._value.get())


async def test_an_unreachable_broker_degrades_per_setting(
    api: Api, runtime: Runtime, fallback: str, caplog: pytest.LogCaptureFixture
) -> None:
    owner_id, ids = await _submit(runtime, 5)
    transport = RedisStreamsTransport(DOWN_URL, consumer="w", claim_idle_s=5)
    worker = runtime.worker(transport=transport)
    fallbacks = _fallbacks()
    running = asyncio.create_task(worker.run())
    try:
        if fallback == "database":
            for job_id in ids:  # claimed from the job table meanwhile
                job = await runtime.jobs.wait(
                    tenant_id=owner_id, job_id=job_id, timeout_s=10, until_terminal=True
                )
                assert job.state is JobState.SUCCEEDED
            ready = await api.http.get("/readyz")
            assert ready.status_code == 200  # the API serves; the warning says how claims go
            assert ready.json()["warnings"] == ["transport_fallback"]
            assert _fallbacks() == fallbacks + 1  # one outage, however many claims
            logged = [r.getMessage() for r in caplog.records if r.name == intake.__name__]
            assert len([m for m in logged if "claiming from the job table meanwhile" in m]) == 1
        else:
            await asyncio.sleep(1.0)
            for job_id in ids:  # nothing claimed, nothing lost: still queued
                queued = await runtime.storage.job_get(job_id=job_id)
                assert queued is not None and queued.state is JobState.QUEUED
            ready = await api.http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["reason"] == "transport_unavailable"
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 10)
        await transport.close()


@pytest.mark.parametrize("fallback", ["database"], indirect=True)
async def test_a_fallback_is_shown_while_it_lasts(
    api: Api, runtime: Runtime, clock: FakeClock
) -> None:
    """Redis behind a proxy that refuses connections, then lets them through again: /readyz
    warns of the fallback during the outage only, and the worker turns back to the broker."""
    _, ids = await _submit(runtime, 1)
    with TcpProxy(("127.0.0.1", 6379)) as proxy:
        proxy.refuse()
        stream = f"jobgate:test-fallback-{ids[0]}"
        url = f"redis://127.0.0.1:{proxy.port}/0"
        transport = RedisStreamsTransport(url, consumer="w", claim_idle_s=5, stream=stream)
        worker = runtime.worker(transport=transport)
        fallbacks = _fallbacks()
        running = asyncio.create_task(worker.run())

        async def warnings() -> list[str]:
            return list((await api.http.get("/readyz")).json().get("warnings", []))

        try:
            await eventually(lambda: _warned(warnings, ["transport_fallback"]), timeout_s=10)
            proxy.heal()
            clock.advance(intake.RETRY_BROKER_S)  # when the worker tries the broker again
            await eventually(lambda: _warned(warnings, []), timeout_s=15)
            assert _fallbacks() == fallbacks + 1
            assert status.warnings() == []
        finally:
            worker.request_stop()
            await asyncio.wait_for(running, 10)
            await transport.close()
            admin = aioredis.from_url("redis://127.0.0.1:6379/0")
            await admin.delete(stream)
            await admin.aclose()


async def _warned(read: Any, expected: list[str]) -> bool:
    return bool(await read() == expected)


async def test_a_failed_publish_is_retried_soon_not_lost(runtime: Runtime) -> None:
    """The ledger committed before the publish: a broker that refuses it leaves the jobs
    deferred by transport_defer_s (then published again), not waiting for the sweep."""
    from jobgate.roles.relay import Relay

    _, ids = await _submit(runtime, 3)
    down = RedisStreamsTransport(DOWN_URL, consumer="relay", claim_idle_s=5)
    relay = Relay(storage=runtime.storage, transport=down, settings=runtime.settings)
    with pytest.raises(TransportUnavailable):
        await relay.relay_once()
    assert status.readiness_failure(runtime.settings) == (
        "transport_unavailable" if runtime.settings.transport_fallback == "fail" else None
    )
    await down.close()
    later = await runtime.storage.database_now() + timedelta(
        seconds=runtime.settings.transport_defer_s + 0.01
    )
    again = await runtime.storage.transport_publish_due(limit=10, republish_after_s=60, now=later)
    assert sorted(p.job_id for p in again) == sorted(ids)


async def test_transport_settings_and_urls() -> None:
    assert load_settings({}).transport == "database"
    with pytest.raises(errors.ConfigError):
        load_settings({"JOBGATE_TRANSPORT": "kafka"})
    with pytest.raises(errors.ConfigError):
        transports.for_settings(Settings(transport="kafka://broker"), consumer="w")
    assert transports.for_settings(Settings(), consumer="w") is None
    redis = transports.for_settings(
        Settings(transport="redis://127.0.0.1:6379/2?stream=mine"), consumer="w"
    )
    assert isinstance(redis, RedisStreamsTransport)
    assert parse_url("sqs://jobs?endpoint_url=http://127.0.0.1:9324&region=eu-west-1") == (
        "jobs",
        "http://127.0.0.1:9324",
        "eu-west-1",
    )
