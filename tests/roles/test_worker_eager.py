"""The worker's one path for every call: each job's call begins at once in the task that
claimed it in a batch; a call answered without waiting has its verdict written with the
batch's others, no task of its own; a call that waits keeps the task it began in, which stays
cancellable. Both stores."""

from __future__ import annotations

import asyncio

import pytest

from jobgate import errors
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.base import ProviderCall, ProviderResult
from jobgate.testing import Block, Fail, ScriptedProvider, Succeed
from tests.support.scripted_jobs import ScriptedTenant, call_tasks


async def _states(runtime: Runtime, ids: list[str]) -> list[JobState]:
    jobs = [await runtime.storage.job_get(job_id=job_id) for job_id in ids]
    return [job.state for job in jobs if job is not None]


async def test_calls_that_answer_at_once_and_calls_that_wait_both_finish(
    runtime: Runtime, acme: ScriptedTenant, scripted: ScriptedProvider
) -> None:
    block = Block()
    refused = errors.ProviderFatal("no", code="invalid_request")
    scripted.script.extend([Succeed(), block, Succeed(), Fail(refused), Succeed()])
    ids = await acme.submit_jobs(5)
    worker = runtime.worker()
    jobs = await worker.claim()
    running = asyncio.create_task(worker.run_claimed(jobs))
    await asyncio.wait_for(block.started.wait(), 10)
    # Only the call that waits has a task of its own; the others were answered at once.
    assert call_tasks() == [f"job {ids[1]}"]
    assert len(scripted.calls) == 5  # every call began, the one that waits included
    block.release.set()
    done = await asyncio.wait_for(running, 10)
    assert [d.state if d else None for d in done] == [
        JobState.SUCCEEDED,
        JobState.SUCCEEDED,
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.SUCCEEDED,
    ]
    assert await _states(runtime, ids) == [d.state for d in done if d]
    assert worker.inflight == 0 and worker.busy == 0


async def test_a_cancel_reaches_a_call_that_waits_after_others_answered(
    runtime: Runtime, acme: ScriptedTenant, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.extend([Succeed(), block, Succeed()])
    ids = await acme.submit_jobs(3)
    worker = runtime.worker()
    jobs = await worker.claim()
    running = asyncio.create_task(worker.run_claimed(jobs))
    await asyncio.wait_for(block.started.wait(), 10)
    await runtime.jobs.cancel(tenant_id=acme.id, job_id=ids[1])
    worker.on_cancel_requested([ids[1]])
    done = await asyncio.wait_for(running, 10)
    assert block.cancelled
    assert [d.state if d else None for d in done] == [
        JobState.SUCCEEDED,
        JobState.CANCELLED,
        JobState.SUCCEEDED,
    ]
    job = await runtime.storage.job_get(job_id=ids[1])
    assert job is not None and job.cancel_outcome == "interrupted"


async def test_cancelling_the_caller_stops_a_call_that_waits_without_a_verdict(
    runtime: Runtime, acme: ScriptedTenant, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.extend([Succeed(), block])
    ids = await acme.submit_jobs(2)
    worker = runtime.worker()
    running = asyncio.create_task(worker.run_claimed(await worker.claim()))
    await asyncio.wait_for(block.started.wait(), 10)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    for _ in range(100):  # the job's own task ends once its cancellation is delivered
        if not call_tasks():
            break
        await asyncio.sleep(0)
    assert block.cancelled and not call_tasks()
    # No verdict for the stopped call: its lease is the reaper's to take back.
    assert (await _states(runtime, ids))[1] is JobState.RUNNING
    assert worker.inflight == 0


@pytest.mark.parametrize(
    ("raised", "state", "code"),
    [
        (errors.ProviderFatal("refused", code="invalid_request"), JobState.FAILED, None),
        (RuntimeError("adapter bug"), None, "internal_error"),
    ],
)
async def test_an_error_raised_before_the_call_waits_is_judged_as_any(
    runtime: Runtime,
    acme: ScriptedTenant,
    scripted: ScriptedProvider,
    monkeypatch: pytest.MonkeyPatch,
    raised: Exception,
    state: JobState | None,
    code: str | None,
) -> None:
    block = Block()
    calls = 0
    play = scripted.call

    async def raising_first(call: ProviderCall) -> ProviderResult:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise raised  # before any suspension: the eager step raises it
        return await play(call)

    monkeypatch.setattr(scripted, "call", raising_first)
    scripted.script.extend([block])
    ids = await acme.submit_jobs(2)
    worker = runtime.worker()
    running = asyncio.create_task(worker.run_claimed(await worker.claim()))
    await asyncio.wait_for(block.started.wait(), 10)
    block.release.set()
    first, second = await asyncio.wait_for(running, 10)
    assert second is not None and second.state is JobState.SUCCEEDED
    job = await runtime.storage.job_get(job_id=ids[0])
    assert job is not None and first is not None and first.state is job.state
    assert job.error is not None
    if state is not None:
        assert job.state is state and job.error["code"] == "invalid_request"
    else:
        assert job.state in (JobState.QUEUED, JobState.FAILED)
        assert job.error["code"] == code
