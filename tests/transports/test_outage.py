"""A broker outage, per `transport_fallback` (docs/transports.md): `database` keeps claiming
from the job table; `fail` claims nothing and fails /readyz until the broker is back."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from jobgate.config import Settings
from jobgate.domain.states import JobState
from jobgate.services.jobs import SubmitSpec
from jobgate.services.runtime import Runtime
from jobgate.transports import status
from jobgate.transports.redis_streams import RedisStreamsTransport
from tests.api_server import Api

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
        transport_fallback=fallback,  # type: ignore[arg-type]
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


async def test_an_unreachable_broker_degrades_per_setting(
    api: Api, runtime: Runtime, fallback: str
) -> None:
    owner_id, ids = await _submit(runtime, 5)
    transport = RedisStreamsTransport(DOWN_URL, consumer="w", claim_idle_s=5)
    worker = runtime.worker(transport=transport)
    running = asyncio.create_task(worker.run())
    try:
        if fallback == "database":
            for job_id in ids:  # claimed from the job table meanwhile
                job = await runtime.jobs.wait(
                    tenant_id=owner_id, job_id=job_id, timeout_s=10, until_terminal=True
                )
                assert job.state is JobState.SUCCEEDED
            assert (await api.http.get("/readyz")).status_code == 200
        else:
            await asyncio.sleep(1.0)
            for job_id in ids:  # nothing claimed, nothing lost: still queued
                job = await runtime.storage.job_get(job_id=job_id)
                assert job is not None and job.state is JobState.QUEUED
            ready = await api.http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["reason"] == "transport_unavailable"
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 10)
        await transport.close()
