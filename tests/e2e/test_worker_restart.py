"""A real `jobgate serve --roles worker,reconciler` process is SIGKILLed while a background job
runs at the provider (the simulator server, in this test process), and started again: the new
process finds the job from its provider id and settles it, without creating it a second time.

The simulator is the realistic one (it does not deduplicate creates by Idempotency-Key, as
neither OpenAI nor Anthropic documents doing); the case of a provider that does is run too,
with `idempotent_creates = true` and a simulator told to deduplicate.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.simulator.server import Simulator
from jobgate.storage.factory import storage_for_url
from jobgate.storage.protocol import Storage
from tests.e2e.gateway import eventually
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.e2e
JOBGATE = str(Path(sys.executable).with_name("jobgate"))


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'jobgate.db'}"
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Storage]:
    storage = storage_for_url(database_url)
    await storage.open()
    await storage.migrate()
    yield storage
    await storage.close()


@pytest.fixture
async def simulator() -> AsyncIterator[Simulator]:
    async with Simulator() as sim:
        yield sim


def start(
    tmp_path: Path, database_url: str, simulator: Simulator, roles: str, **env: str
) -> subprocess.Popen[bytes]:
    config = tmp_path / "jobgate.toml"
    dedupes = "true" if simulator.engine.idempotent else "false"  # only where it is true
    config.write_text(
        "[providers.upstream]\n"
        'kind = "openai"\n'
        f'base_url = "{simulator.openai_base_url}"\n'
        'mode = "background"\n'
        f"idempotent_creates = {dedupes}\n"
        f"reconcile_after_s = {env.pop('RECONCILE_AFTER_S', '600')}\n"
    )
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("JOBGATE_")
    }
    environment.update(
        JOBGATE_CONFIG=str(config),
        JOBGATE_DATABASE_URL=database_url,
        JOBGATE_LEASE_TTL_S="2",
        JOBGATE_HEARTBEAT_INTERVAL_S="0.5",
        JOBGATE_REAPER_INTERVAL_S="0.3",
        JOBGATE_RECONCILER_INTERVAL_S="0.2",
        JOBGATE_WORKER_POLL_INTERVAL_S="0.1",
        JOBGATE_RETRY_BASE_S="0.1",
        JOBGATE_RETRY_MAX_S="0.2",
        JOBGATE_SHUTDOWN_GRACE_S="1",
        **env,
    )
    with (tmp_path / f"serve-{roles}.log").open("ab") as log:  # the child keeps its copy
        return subprocess.Popen(
            [JOBGATE, "serve", "--roles", roles],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


async def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    await eventually(lambda: process.poll() is not None, timeout_s=20)


async def until(db: Storage, job_id: str, check: Any, *, timeout_s: float = 60) -> Job:
    async with asyncio.timeout(timeout_s):
        while True:
            job = await db.job_get(job_id=job_id)
            assert job is not None
            if check(job):
                return job
            await asyncio.sleep(0.05)


async def submit(db: Storage, **sim: Any) -> Job:
    tenant = await make_tenant(db)
    body = {"model": "gpt-4.1", "input": "survive a crash", "sim": {"webhooks": "none", **sim}}
    job = new_job(tenant, provider="upstream", endpoint="/v1/responses", request=body)
    return (await submit_one(db, job=job)).job


async def test_worker_killed_while_the_provider_runs_the_job(
    tmp_path: Path, database_url: str, db: Storage, simulator: Simulator
) -> None:
    job = await submit(db, latency_s=3)
    first = start(tmp_path, database_url, simulator, "worker,reconciler")
    try:
        accepted = await until(db, job.id, lambda j: j.provider_job_id is not None)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        await stop(first)
    assert first.returncode == -signal.SIGKILL
    assert accepted.state is JobState.RUNNING and accepted.lease_token is None
    provider_job_id = accepted.provider_job_id or ""
    # The provider finishes while no jobgate process runs.
    await eventually(lambda: simulator.engine.response(provider_job_id)["status"] == "completed")  # type: ignore[index]
    # Its first status check is ten minutes away; only the restarted reconciler's refresh of
    # every job with a provider id can settle it sooner.
    second = start(tmp_path, database_url, simulator, "worker,reconciler,reaper")
    try:
        done = await until(db, job.id, lambda j: j.terminal)
    finally:
        await stop(second)
    assert done.state is JobState.SUCCEEDED and done.result is not None
    assert done.provider_job_id == accepted.provider_job_id
    assert simulator.engine.created == [accepted.provider_job_id]  # created once, not twice
    events = await db.job_events(job_id=job.id)
    assert [(e.to_state, e.actor) for e in events if e.applied][-1] == (
        JobState.SUCCEEDED, "reconciler"
    )  # fmt: skip


@pytest.mark.parametrize("dedupes", [False, True], ids=["realistic", "deduplicating_provider"])
async def test_worker_killed_between_create_and_recording_it(
    tmp_path: Path, database_url: str, db: Storage, simulator: Simulator, dedupes: bool
) -> None:
    simulator.engine.idempotent = dedupes
    job = await submit(db, latency_s=0.5)
    first = start(
        tmp_path,
        database_url,
        simulator,
        "worker",
        JOBGATE_FAILPOINTS="after_provider_create=kill",
    )
    try:
        await eventually(lambda: first.poll() is not None)
    finally:
        await stop(first)
    assert first.returncode == -signal.SIGKILL
    orphan = await db.job_get(job_id=job.id)
    assert orphan is not None and orphan.creation_outcome == "sending"
    assert orphan.provider_job_id is None and len(simulator.engine.created) == 1
    second = start(
        tmp_path, database_url, simulator, "worker,reconciler,reaper", RECONCILE_AFTER_S="0.3"
    )
    try:
        done = await until(db, job.id, lambda j: j.terminal)
    finally:
        await stop(second)
    creates = [r for r in simulator.engine.requests if r.path == "/v1/responses"]
    if not dedupes:
        # The provider may be running it and a re-send would run it twice: failed loudly,
        # never sent again (JOBGATE_UNKNOWN_OUTCOME=fail).
        assert done.state is JobState.FAILED and done.creation_outcome == "unknown"
        assert done.error is not None and done.error["code"] == "creation_outcome_unknown"
        assert len(creates) == 1 and len(simulator.engine.created) == 1
        return
    assert done.state is JobState.SUCCEEDED and done.creation_outcome == "accepted"
    # Sent twice, created once: the provider answered the second create with the first job.
    assert len(creates) == 2
    assert simulator.engine.created == [done.provider_job_id]
