"""The worker's lean hot path: one task per job, the slot freed when the verdict
reaches the finish batcher, and transitions summarised at info level instead of logged one by
one. Both stores."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.process.runtime import Runtime
from jobgate.providers.base import ProviderCall, ProviderResult
from jobgate.roles import finish_summary
from jobgate.roles import worker as worker_module
from jobgate.services import submit_summary
from jobgate.storage.records import Finished
from jobgate.testing import Block, FakeClock, ScriptedProvider, Succeed
from tests.support.scripted_jobs import ScriptedTenant, call_tasks


async def test_a_running_job_is_one_task_and_a_cancel_still_interrupts_it(
    runtime: Runtime, acme: ScriptedTenant, scripted: ScriptedProvider
) -> None:
    blocks = [Block(), Block(), Block()]
    scripted.script.extend(blocks)
    ids = await acme.submit_jobs(len(blocks))
    worker = runtime.worker(concurrency=8)
    loop_task = asyncio.create_task(worker.run())
    try:
        for block in blocks:
            await asyncio.wait_for(block.started.wait(), 10)
        # The provider call runs inside the job's task: no watcher or call task beside it.
        assert call_tasks() == sorted(f"job {job_id}" for job_id in ids)
        first = scripted.calls[0].job_id
        await runtime.jobs.cancel(tenant_id=acme.id, job_id=first)
        cancelled = await runtime.jobs.wait(
            tenant_id=acme.id, job_id=first, timeout_s=10, until_terminal=True
        )
        assert cancelled.state is JobState.CANCELLED
        assert cancelled.cancel_outcome == "interrupted"
        for block in blocks:
            block.release.set()
        for job_id in ids:
            if job_id == first:
                continue
            done = await runtime.jobs.wait(
                tenant_id=acme.id, job_id=job_id, timeout_s=10, until_terminal=True
            )
            assert done.state is JobState.SUCCEEDED
        assert [b.cancelled for b in blocks].count(True) == 1
    finally:
        worker.request_stop()
        await asyncio.wait_for(loop_task, 10)


async def test_cancelling_the_worker_itself_is_not_turned_into_a_verdict(
    runtime: Runtime, acme: ScriptedTenant, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    job_id = await acme.submit()
    running = asyncio.create_task(runtime.worker().run_once())
    await asyncio.wait_for(block.started.wait(), 10)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    job = await runtime.storage.job_get(job_id=job_id)
    assert job is not None and job.state is JobState.RUNNING  # the reaper's, not a verdict


async def test_an_adapter_raising_cancelled_error_itself_fails_the_attempt(
    runtime: Runtime,
    acme: ScriptedTenant,
    scripted: ScriptedProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def cancels_itself(call: ProviderCall) -> ProviderResult:
        raise asyncio.CancelledError  # nobody cancelled the job's task: a bug in the adapter

    monkeypatch.setattr(scripted, "call", cancels_itself)
    await acme.submit()
    [done] = await runtime.worker().run_once()
    assert done is not None and done.state in (JobState.QUEUED, JobState.FAILED)
    assert done.error is not None and done.error["code"] == "internal_error"


async def test_the_slot_is_free_while_the_verdict_waits_for_its_commit(
    runtime: Runtime,
    acme: ScriptedTenant,
    scripted: ScriptedProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = runtime.storage
    real_finish_many = storage.job_finish_many
    entered = asyncio.Event()
    release = asyncio.Event()

    async def slow_first_commit(
        *, finishes: Sequence[Finish], now: Any = None
    ) -> list[Finished | None]:
        if not release.is_set():
            entered.set()
            await release.wait()
        return await real_finish_many(finishes=finishes, now=now)

    monkeypatch.setattr(storage, "job_finish_many", slow_first_commit)
    second = Block()
    scripted.script.extend([Succeed(), second])
    ids = await acme.submit_jobs(2)
    worker = runtime.worker(concurrency=1)
    loop_task = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(entered.wait(), 10)
        # One slot, its job's verdict still uncommitted: the second job is claimed and called
        # meanwhile, and the first keeps its lease (it is still held, for the heartbeat).
        await asyncio.wait_for(second.started.wait(), 10)
        assert worker.busy == 1 and worker.inflight == 2
        assert {lease.job_id for lease in worker.held_leases()} == set(ids)
        second.release.set()
        release.set()
        for job_id in ids:
            done = await runtime.jobs.wait(
                tenant_id=acme.id, job_id=job_id, timeout_s=10, until_terminal=True
            )
            assert done.state is JobState.SUCCEEDED
    finally:
        release.set()
        worker.request_stop()
        await asyncio.wait_for(loop_task, 10)
    assert worker.busy == 0 and worker.inflight == 0


async def test_transitions_are_debug_lines_and_an_info_summary(
    runtime: Runtime, acme: ScriptedTenant, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    worker = runtime.worker()
    with caplog.at_level(logging.INFO, logger=worker_module.__name__):
        await acme.submit()
        await worker.run_once()
        assert not [r for r in caplog.records if r.getMessage() == "job transition"]
        assert not [r for r in caplog.records if r.getMessage() == "jobs finished"]
        clock.advance(finish_summary.SUMMARY_INTERVAL_S + 1)
        await acme.submit()
        await worker.run_once()
    [summary] = [r for r in caplog.records if r.getMessage() == "jobs finished"]
    assert summary.levelno == logging.INFO
    assert summary.__dict__["by_state"] == {"succeeded": 2}
    assert not [r for r in caplog.records if r.getMessage() == "job transition"]


async def test_single_submits_are_debug_lines_and_an_info_summary(
    acme: ScriptedTenant, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=submit_summary.log.name):
        await acme.submit()
        await acme.submit()
        assert not [r for r in caplog.records if r.name == submit_summary.log.name]
        clock.advance(submit_summary.SUMMARY_INTERVAL_S + 1)
        await acme.submit()
    lines = [r for r in caplog.records if r.name == submit_summary.log.name]
    assert [(r.getMessage(), r.levelno, r.__dict__["count"]) for r in lines] == [
        ("jobs submitted", logging.INFO, 3)
    ]
    with caplog.at_level(logging.DEBUG, logger=submit_summary.log.name):
        job_id = await acme.submit()
    [line] = [r for r in caplog.records if r.getMessage() == "job transition"]
    assert (line.levelno, line.__dict__["job_id"], line.__dict__["to_state"]) == (
        logging.DEBUG,
        job_id,
        "queued",
    )


def _claims_asked(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The limit of each claim statement from now on, recorded when it is called (before it
    answers)."""
    asked: list[int] = []
    claim = runtime.storage.job_claim

    async def counted(**params: Any) -> Any:
        asked.append(params["limit"])
        return await claim(**params)

    monkeypatch.setattr(runtime.storage, "job_claim", counted)
    return asked


async def test_a_claim_answered_short_waits_for_a_wake_up_before_claiming_again(
    runtime: Runtime,
    acme: ScriptedTenant,
    scripted: ScriptedProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim that leased fewer jobs than it asked for took all there was: the next one waits
    for the next submit's wake-up (it used to run at once and find nothing, every other claim
    when jobs trickle in)."""
    blocks = [Block(), Block(), Block()]
    scripted.script.extend(blocks)
    for _ in range(2):
        await acme.submit()
    asked = _claims_asked(runtime, monkeypatch)
    worker = runtime.worker(concurrency=8)
    loop_task = asyncio.create_task(worker.run())
    try:
        for block in blocks[:2]:
            await asyncio.wait_for(block.started.wait(), 10)
        assert asked == [8]  # two of eight: not claimed again at once
        await acme.submit()  # the wake-up
        await asyncio.wait_for(blocks[2].started.wait(), 10)
        assert asked == [8, 6]
        for block in blocks:
            block.release.set()
    finally:
        worker.request_stop()
        await asyncio.wait_for(loop_task, 10)


async def test_a_claim_answered_in_full_claims_again_at_once(
    runtime: Runtime,
    acme: ScriptedTenant,
    scripted: ScriptedProvider,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks = [Block(), Block(), Block()]
    scripted.script.extend(blocks)
    for _ in blocks:
        await acme.submit()
    monkeypatch.setattr(worker_module, "CLAIM_BATCH_MAX", 2)
    asked = _claims_asked(runtime, monkeypatch)
    worker = runtime.worker(concurrency=8)
    loop_task = asyncio.create_task(worker.run())
    try:
        for block in blocks:  # the third without a wake-up: the full claim's follow-up took it
            await asyncio.wait_for(block.started.wait(), 10)
        assert asked == [2, 2]  # the second, answered short, waits
        for block in blocks:
            block.release.set()
    finally:
        worker.request_stop()
        await asyncio.wait_for(loop_task, 10)
