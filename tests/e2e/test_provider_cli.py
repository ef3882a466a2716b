"""The provider commands as real processes: `jobgate simulator`, and `jobgate worker` beside
`jobgate reconciler` (scaled out as separate roles) finishing a background job."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from jobgate.domain.states import JobState
from jobgate.simulator.server import Simulator
from jobgate.storage.factory import storage_for_url
from jobgate.storage.protocol import Storage
from tests.e2e.gateway import eventually
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.e2e
JOBGATE = str(Path(sys.executable).with_name("jobgate"))


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env.update(extra)
    return env


def spawn(
    *args: str, env: dict[str, str], stdout: int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    return subprocess.Popen([JOBGATE, *args], env=env, stdout=stdout, stderr=subprocess.DEVNULL)


async def exit_code(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    await eventually(lambda: process.poll() is not None, timeout_s=30)
    return process.returncode


async def test_simulator_command() -> None:
    process = spawn("simulator", "--port", "0", env=clean_env(), stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), timeout=30)
        match = re.search(rb"listening on (http://[\d.]+:\d+)", line)
        assert match, line
        url = match.group(1).decode()
        async with httpx.AsyncClient(base_url=url) as client:
            answer = await client.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "over the wire"}]},
            )
        assert answer.status_code == 200
        assert "over the wire" in answer.json()["choices"][0]["message"]["content"]
    finally:
        assert await exit_code(process) == 0
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture
async def pg(pg_dsn: str) -> AsyncIterator[Storage]:
    storage = storage_for_url(pg_dsn)
    await storage.open()
    yield storage
    await storage.close()


@pytest.mark.postgres
async def test_worker_and_reconciler_as_separate_processes_on_postgres(
    tmp_path: Path, pg_dsn: str, pg: Storage
) -> None:
    async with Simulator() as simulator:
        config = tmp_path / "jobgate.toml"
        config.write_text(
            "[providers.upstream]\n"
            'kind = "openai"\n'
            f'base_url = "{simulator.openai_base_url}"\n'
            'mode = "background"\n'
            "reconcile_after_s = 0.3\n"
        )
        env = clean_env(
            JOBGATE_CONFIG=str(config),
            JOBGATE_DATABASE_URL=pg_dsn,
            JOBGATE_RECONCILER_INTERVAL_S="0.2",
            JOBGATE_WORKER_POLL_INTERVAL_S="0.1",
        )
        tenant = await make_tenant(pg)
        body = {"model": "gpt-4.1", "input": "two processes", "sim": {"latency_s": 0.2}}
        job = new_job(tenant, provider="upstream", endpoint="/v1/responses", request=body)
        await submit_one(pg, job=job)
        processes = [spawn(role, env=env) for role in ("worker", "reconciler")]
        try:

            async def settled() -> bool:
                current = await pg.job_get(job_id=job.id)
                return current is not None and current.terminal

            await eventually(settled, timeout_s=60)
        finally:
            codes = [await exit_code(process) for process in processes]
        done = await pg.job_get(job_id=job.id)
        assert done is not None and done.state is JobState.SUCCEEDED
        assert codes == [0, 0]
        events = await pg.job_events(job_id=job.id)
        actors = {e.to_state: e.actor for e in events}
        assert actors[JobState.SUCCEEDED] == "reconciler"
        assert actors[JobState.RUNNING].startswith("worker:")
