"""Hundreds of calls in flight in one worker, on both stores: one claim fills the default slots,
and one heartbeat renews every lease at once (the statement count does not grow with calls)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobgate.domain.states import JobState
from jobgate.services.jobs import SubmitSpec
from jobgate.services.runtime import Runtime
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
