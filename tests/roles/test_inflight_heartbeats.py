"""Hundreds of calls in flight in one worker, on both stores: one claim fills the default slots,
and one heartbeat renews every lease at once (the statement count does not grow with calls)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from jobgate.config import ProviderConfig, Settings
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.services.jobs import SubmitSpec
from jobgate.testing import Block, FakeClock, ScriptedProvider

CALLS = 300


async def _wait_for(condition: Any, timeout_s: float = 20) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 (the calls start on their own tasks)
            await asyncio.sleep(0.01)


async def test_one_heartbeat_renews_hundreds_of_leases(
    runtime: Runtime,
    scripted: ScriptedProvider,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    block = Block()
    scripted.default = block  # every call waits on the same release
    owner = (await runtime.tenants.create("acme")).tenant
    body = {"model": "m", "messages": [{"role": "user", "content": "long"}]}
    spec = SubmitSpec(endpoint="/v1/chat/completions", body=body, provider="scripted")
    await runtime.jobs.submit_many(tenant_id=owner.id, specs=[spec] * CALLS)
    storage = runtime.storage
    renewals: list[int] = []
    renew = storage.job_heartbeat

    async def counted(**kwargs: Any) -> Any:
        renewals.append(len(kwargs["leases"]))
        return await renew(**kwargs)

    monkeypatch.setattr(storage, "job_heartbeat", counted)
    worker = runtime.worker()  # the default slots: no tuning for long calls
    running = asyncio.create_task(worker.run_once())
    await _wait_for(lambda: len(scripted.calls) == CALLS)
    assert worker.inflight == CALLS
    claimed = {job.lease_expires_at for job in await _running(runtime, owner.id)}

    clock.advance(15)
    assert await worker.heartbeat_once()
    assert renewals == [CALLS]  # one storage call carrying every lease
    renewed = {job.lease_expires_at for job in await _running(runtime, owner.id)}
    assert len(renewed) == 1  # one statement (or one SQLite write) stamped them all
    assert renewed.isdisjoint(claimed)

    block.release.set()
    done = await asyncio.wait_for(running, 30)
    assert len(done) == CALLS
    assert all(job is not None and job.state is JobState.SUCCEEDED for job in done)


async def _running(runtime: Runtime, tenant_id: str) -> list[Any]:
    jobs: list[Any] = []
    after = None
    while True:
        page = await runtime.storage.job_list(
            tenant_id=tenant_id, states=[JobState.RUNNING], after=after, limit=100
        )
        jobs += page
        if len(page) < 100:
            return jobs
        after = page[-1].id


async def test_a_renewal_slower_than_the_interval_is_waited_for_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scripted: ScriptedProvider
) -> None:
    """Real time, tiny intervals: every renewal answers after 1.5 intervals. It is awaited
    (not cancelled after one interval, which lost every lease), never overlaps the next, and
    the call it keeps alive finishes under its first lease."""
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'jobgate.db'}",
        lease_ttl_s=1.2,  # calls stop 0.9 s after the last renewal was sent
        heartbeat_interval_s=0.2,
        worker_poll_interval_s=5,
        shutdown_grace_s=0,
    )
    registry = ProviderRegistry(
        {"scripted": scripted}, configs={"scripted": ProviderConfig(kind="sim")}, default="scripted"
    )
    runtime = Runtime(settings, providers=registry)  # the system clock: the loop ticks
    await runtime.open()
    try:
        block = Block()
        scripted.default = block
        owner = (await runtime.tenants.create("acme")).tenant
        body = {"model": "m", "messages": [{"role": "user", "content": "long"}]}
        spec = SubmitSpec(endpoint="/v1/chat/completions", body=body, provider="scripted")
        [job] = await runtime.jobs.submit_many(tenant_id=owner.id, specs=[spec])
        renew = runtime.storage.job_heartbeat
        overlapping = most_overlapping = 0
        answered: list[int] = []

        async def slow(**kwargs: Any) -> Any:
            nonlocal overlapping, most_overlapping
            overlapping += 1
            most_overlapping = max(most_overlapping, overlapping)
            try:
                await asyncio.sleep(0.3)  # 1.5 intervals
                held = await renew(**kwargs)
                answered.append(len(held))
                return held
            finally:
                overlapping -= 1

        monkeypatch.setattr(runtime.storage, "job_heartbeat", slow)
        worker = runtime.worker()
        loop = asyncio.create_task(worker.run())
        try:
            await _wait_for(lambda: block.started.is_set(), 10)
            # Three lease lengths: without renewals landing the call would have been stopped.
            await _wait_for(lambda: len(answered) >= 8, 10)
            assert not block.cancelled and worker.inflight == 1
            block.release.set()
            done = await _wait_for_job(runtime, job.id)
        finally:
            worker.request_stop()
            await asyncio.wait_for(loop, 10)
        assert done.state is JobState.SUCCEEDED and done.attempt == 1
        assert set(answered) == {1}
        assert most_overlapping == 1  # one renewal in flight at a time
    finally:
        await runtime.close()


async def _wait_for_job(runtime: Runtime, job_id: str) -> Any:
    async with asyncio.timeout(10):
        while True:
            job = await runtime.storage.job_get(job_id=job_id)
            if job is not None and job.state.terminal:
                return job
            await asyncio.sleep(0.02)
