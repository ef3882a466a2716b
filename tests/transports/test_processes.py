"""Real `jobgate serve --roles worker,reaper` processes fed by each transport: one
of two is SIGKILLed while it holds jobs and unacked messages; every job still ends exactly
once (the reaper takes the leases back, the relay publishes again, a redelivery is dropped)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobgate.config import Settings
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec
from tests.transports.brokers import Broker
from tests.transports.conftest import Cluster

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(90)]


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    made = Runtime(Settings(database_url=f"sqlite:///{tmp_path / 'jobgate.db'}"))
    await made.open(migrate=True)
    yield made
    await made.close()


def _start(tmp_path: Path, runtime: Runtime, broker: Broker) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("JOBGATE_")}
    env.update(
        JOBGATE_DATABASE_URL=runtime.settings.database_url,
        JOBGATE_TRANSPORT=broker.url(),
        JOBGATE_LEASE_TTL_S="2",
        JOBGATE_HEARTBEAT_INTERVAL_S="0.5",
        JOBGATE_REAPER_INTERVAL_S="0.3",
        JOBGATE_WORKER_POLL_INTERVAL_S="0.1",
        JOBGATE_WORKER_CONCURRENCY="4",
        JOBGATE_TRANSPORT_SWEEP_AFTER_S="3",
        JOBGATE_SHUTDOWN_GRACE_S="0",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    return subprocess.Popen(
        [sys.executable, "-m", "jobgate.cli", "serve", "--roles", "worker,reaper"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def test_a_worker_process_killed_mid_run(
    tmp_path: Path, runtime: Runtime, broker: Broker
) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    ids = []
    for i in range(24):
        body = {
            "model": "sim-echo",
            "messages": [{"role": "user", "content": str(i)}],
            "sim": {"latency_s": 0.4},
        }
        outcome = await runtime.jobs.submit(
            tenant_id=owner.id, spec=SubmitSpec(endpoint="/v1/chat/completions", body=body)
        )
        ids.append(outcome.job.id)
    # The survivor starts once the victim holds jobs: started together on a loaded machine,
    # the survivor could take every job before the victim was up.
    victim = _start(tmp_path, runtime, broker)
    survivor: subprocess.Popen[bytes] | None = None
    try:
        async with asyncio.timeout(60):  # until the victim holds jobs
            while True:
                jobs = [await runtime.storage.job_get(job_id=job_id) for job_id in ids]
                held = [
                    j
                    for j in jobs
                    if j is not None
                    and j.state is JobState.RUNNING
                    and f":{victim.pid}:" in (j.lease_owner or "")
                ]
                if held:
                    break
                await asyncio.sleep(0.05)
        survivor = _start(tmp_path, runtime, broker)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        # Polled: this process hears nothing from the workers' SQLite writes.
        await Cluster(runtime, broker).wait_terminal(ids, timeout_s=45)
        for job_id in ids:
            job = await runtime.storage.job_get(job_id=job_id)
            assert job is not None and job.state is JobState.SUCCEEDED, job
            events = await runtime.storage.job_events(job_id=job_id)
            finished = [e for e in events if e.applied and e.to_state is JobState.SUCCEEDED]
            assert len(finished) == 1
        lost = {held_job.id for held_job in held}
        for job_id in lost:  # the killed attempt counted, the second one finished it
            job = await runtime.storage.job_get(job_id=job_id)
            assert job is not None and job.run_count == 2
    finally:
        for proc in (victim, survivor):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
