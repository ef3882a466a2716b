"""The worker against both stores: verdicts per failure class, cancellation, fencing, leases."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest

from jobgate import errors
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.records import Tenant
from jobgate.testing import Block, Fail, FakeClock, ScriptedProvider, Succeed
from tests.storage.helpers import release

CHAT = "/v1/chat/completions"


async def make_due(runtime: Runtime, clock: FakeClock, job_id: str) -> None:
    """Move time past a retried job's backoff (the fake clock, or real time on PostgreSQL,
    whose own clock decides)."""
    job = await runtime.storage.job_get(job_id=job_id)
    assert job is not None
    clock.set(job.run_at + timedelta(milliseconds=1))
    if runtime.storage.dialect == "postgres":
        wait_s = (job.run_at - await runtime.storage.database_now()).total_seconds()
        await asyncio.sleep(max(0.0, wait_s) + 0.01)


async def tenant(runtime: Runtime, name: str = "acme") -> Tenant:
    return (await runtime.tenants.create(name)).tenant


async def submit(
    runtime: Runtime, owner: Tenant, *, provider: str = "scripted", **spec: Any
) -> str:
    body = spec.pop("body", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    outcome = await runtime.jobs.submit(
        tenant_id=owner.id,
        spec=SubmitSpec(
            endpoint=CHAT,
            body=body,
            provider=provider,
            **spec,
        ),
    )
    return outcome.job.id


async def test_success_records_result_usage_and_events(
    runtime: Runtime, scripted: ScriptedProvider
) -> None:
    owner = await tenant(runtime)
    job_id = await submit(runtime, owner)
    [done] = await runtime.worker().run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    assert done.result == {"ok": True}
    assert done.usage == {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    assert [c.idempotency_key for c in scripted.calls] == [job_id]
    ledger = await runtime.storage.usage_for_job(job_id=job_id)
    assert [(u.kind, u.input_tokens) for u in ledger] == [("completion", 10)]


async def test_sim_provider_answers_a_chat_completion(runtime: Runtime) -> None:
    owner = await tenant(runtime)
    await submit(
        runtime,
        owner,
        provider="sim",
        body={"model": "sim-echo", "messages": [{"role": "user", "content": "ping"}]},
    )
    [done] = await runtime.worker().run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    assert done.result is not None
    assert done.result["choices"][0]["message"]["content"] == "echo: ping"


async def test_retryable_then_success(
    runtime: Runtime, scripted: ScriptedProvider, clock: FakeClock
) -> None:
    scripted.script.extend([Fail(errors.ProviderRetryable("boom", status_code=502)), Succeed()])
    owner = await tenant(runtime)
    job_id = await submit(runtime, owner)
    worker = runtime.worker()
    [retried] = await worker.run_once()
    assert retried is not None and retried.state is JobState.QUEUED and retried.attempt == 1
    assert retried.error is not None and retried.error["code"] == "server_error"
    assert retried.run_at <= retried.updated_at + timedelta(seconds=0.05)
    await make_due(runtime, clock, job_id)
    [done] = await worker.run_once()
    assert done is not None and done.state is JobState.SUCCEEDED and done.attempt == 2
    assert done.error is None
    events = await runtime.storage.job_events(job_id=job_id)
    assert [e.to_state for e in events] == [
        JobState.QUEUED,
        JobState.RUNNING,
        JobState.QUEUED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
    ]


async def test_fatal_fails_at_once(runtime: Runtime, scripted: ScriptedProvider) -> None:
    scripted.script.append(Fail(errors.ProviderFatal("bad model", status_code=400)))
    owner = await tenant(runtime)
    await submit(runtime, owner)
    [done] = await runtime.worker().run_once()
    assert done is not None and done.state is JobState.FAILED and not done.dead_lettered
    assert done.error is not None and done.error["type"] == "invalid_request_error"


async def test_rate_limit_reschedules_without_burning_an_attempt(
    runtime: Runtime, scripted: ScriptedProvider
) -> None:
    scripted.script.append(Fail(errors.ProviderRateLimited("slow down", retry_after_s=30)))
    owner = await tenant(runtime)
    await submit(runtime, owner)
    [done] = await runtime.worker().run_once()
    assert done is not None and done.state is JobState.QUEUED and done.attempt == 0
    waited_s = (done.run_at - done.updated_at).total_seconds()
    assert 30 - 0.01 <= waited_s <= 30 * 1.2 + 0.01  # as asked, spread by up to a fifth more


async def test_exhausted_attempts_dead_letter(
    runtime: Runtime, scripted: ScriptedProvider, clock: FakeClock
) -> None:
    scripted.default = Fail(errors.ProviderRetryable("down"))
    owner = await tenant(runtime)
    job_id = await submit(runtime, owner, max_attempts=2)
    worker = runtime.worker()
    await worker.run_once()
    await make_due(runtime, clock, job_id)
    [done] = await worker.run_once()
    assert done is not None and done.state is JobState.FAILED and done.dead_lettered
    assert done.attempt == 2
    redriven = await runtime.jobs.retry(tenant_id=owner.id, job_id=job_id)
    assert redriven.state is JobState.QUEUED and redriven.attempt == 0


async def test_unknown_outcome_fails_by_default(
    runtime: Runtime, scripted: ScriptedProvider
) -> None:
    scripted.script.append(Fail(errors.ProviderOutcomeUnknown("connection dropped after send")))
    owner = await tenant(runtime)
    await submit(runtime, owner)
    [done] = await runtime.worker().run_once()
    assert done is not None and done.state is JobState.FAILED
    assert done.creation_outcome == "unknown"
    assert done.error is not None and done.error["code"] == "creation_outcome_unknown"


async def test_cancel_interrupts_a_running_call(
    runtime: Runtime, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    owner = await tenant(runtime)
    job_id = await submit(runtime, owner)
    worker = runtime.worker()
    with runtime.storage.changes.on_cancel(worker.on_cancel_requested):
        running = asyncio.create_task(worker.run_once())
        await asyncio.wait_for(block.started.wait(), 5)
        asked = await runtime.jobs.cancel(tenant_id=owner.id, job_id=job_id)
        assert asked.state is JobState.RUNNING and asked.cancel_requested_at is not None
        [done] = await asyncio.wait_for(running, 5)
    assert block.cancelled
    assert done is not None and done.state is JobState.CANCELLED
    assert done.cancel_outcome == "interrupted"


async def test_heartbeat_delivers_a_cancel_from_another_process(
    runtime: Runtime, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    owner = await tenant(runtime)
    job_id = await submit(runtime, owner)
    worker = runtime.worker()
    running = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(block.started.wait(), 5)
    await runtime.storage.job_cancel(job_id=job_id, tenant_id=owner.id, actor="other")
    await worker.heartbeat_once()
    [done] = await asyncio.wait_for(running, 5)
    assert done is not None and done.state is JobState.CANCELLED


async def test_reclaimed_lease_drops_the_result(
    runtime: Runtime, scripted: ScriptedProvider, clock: FakeClock
) -> None:
    block = Block(then=Succeed({"from": "stale worker"}))
    scripted.script.append(block)
    owner = await tenant(runtime)
    job_id = await submit(runtime, owner)
    stale = runtime.worker(worker_id="stale")
    running = asyncio.create_task(stale.run_once())
    await asyncio.wait_for(block.started.wait(), 5)
    # The lease runs out (the worker was paused) and the reaper gives the job to another worker.
    db_now = await runtime.storage.database_now()
    clock.set(db_now)
    reaped = await runtime.reaper().reap_once(now=clock.advance(61))
    assert reaped.reaped.requeued == [job_id]
    fresh = runtime.worker(worker_id="fresh")
    job = await runtime.storage.job_get(job_id=job_id)
    assert job is not None
    due = job.run_at + timedelta(milliseconds=1)  # past the backoff (float rounding on SQLite)
    await runtime.storage.job_claim(worker_id="fresh", limit=1, lease_ttl_s=60, now=due)
    block.release.set()
    [dropped] = await asyncio.wait_for(running, 5)
    assert dropped is None
    events = await runtime.storage.job_events(job_id=job_id)
    ignored = [e for e in events if not e.applied]
    assert [(e.actor, e.to_state, e.reason) for e in ignored] == [
        ("stale", JobState.SUCCEEDED, "lease_lost")
    ]
    current = await runtime.storage.job_get(job_id=job_id)
    assert current is not None and current.state is JobState.RUNNING
    assert current.lease_owner == "fresh" and current.result is None
    del fresh


async def test_heartbeat_loss_stops_the_call(
    runtime: Runtime, scripted: ScriptedProvider, clock: FakeClock
) -> None:
    block = Block()
    scripted.script.append(block)
    owner = await tenant(runtime)
    job_id = await submit(runtime, owner)
    worker = runtime.worker()
    running = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(block.started.wait(), 5)
    lease = worker.held_leases()[0]
    # Someone else took the job (its lease token changed): the heartbeat finds it gone.
    await release(runtime.storage, leases=[lease], reason="test")
    await worker.heartbeat_once()
    assert await asyncio.wait_for(running, 5) == [None]
    assert block.cancelled
    job = await runtime.storage.job_get(job_id=job_id)
    assert job is not None and job.state is JobState.QUEUED


async def test_unreachable_database_stops_work_before_the_lease_expires(
    runtime: Runtime,
    scripted: ScriptedProvider,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    block = Block()
    scripted.script.append(block)
    owner = await tenant(runtime)
    await submit(runtime, owner)
    worker = runtime.worker()
    running = asyncio.create_task(worker.run_once())
    await asyncio.wait_for(block.started.wait(), 5)

    async def unreachable(**_: object) -> list[object]:
        raise errors.StorageUnavailable("test: network partition")

    monkeypatch.setattr(runtime.storage, "job_heartbeat", unreachable)
    clock.advance(30)
    await worker.heartbeat_once()  # fails, but the lease still has 30 s
    assert not block.cancelled
    clock.advance(15)  # 45 s without renewal: within one heartbeat of expiry
    with caplog.at_level(logging.WARNING):
        await worker.heartbeat_once()
    assert await asyncio.wait_for(running, 5) == [None]
    assert block.cancelled
    assert "lease about to expire" in caplog.text


async def test_execution_deadline_fails_the_job(
    runtime: Runtime, scripted: ScriptedProvider
) -> None:
    scripted.script.append(Block())
    owner = await tenant(runtime)
    await submit(runtime, owner, execution_timeout_s=0.2)
    [done] = await asyncio.wait_for(runtime.worker().run_once(), 10)
    assert done is not None and done.state is JobState.FAILED
    assert done.error == {
        "code": "deadline_exceeded",
        "message": "the job ran past its execution deadline",
        "type": "timeout_error",  # the same body from the worker, the reaper and the reconciler
    }


async def test_graceful_stop_releases_unfinished_jobs(
    runtime: Runtime, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    owner = await tenant(runtime)
    job_id = await submit(runtime, owner)
    worker = runtime.worker()
    loop_task = asyncio.create_task(worker.run())
    await asyncio.wait_for(block.started.wait(), 5)
    worker.request_stop()
    await asyncio.wait_for(loop_task, 10)
    job = await runtime.storage.job_get(job_id=job_id)
    assert job is not None and job.state is JobState.QUEUED and job.attempt == 0
    assert job.lease_token is None
    assert (await runtime.storage.job_events(job_id=job_id))[-1].reason == "worker_shutdown"


async def test_run_loop_drains_the_queue(runtime: Runtime) -> None:
    owner = await tenant(runtime)
    ids = [
        await submit(
            runtime,
            owner,
            provider="sim",
            body={"model": "sim-echo", "messages": [{"role": "user", "content": str(i)}]},
        )
        for i in range(40)
    ]
    worker = runtime.worker(concurrency=8)
    loop_task = asyncio.create_task(worker.run())
    try:
        for job_id in ids:
            job = await runtime.jobs.wait(
                tenant_id=owner.id, job_id=job_id, timeout_s=20, until_terminal=True
            )
            assert job.state is JobState.SUCCEEDED
    finally:
        worker.request_stop()
        await asyncio.wait_for(loop_task, 10)


async def test_sim_fail_times_counts_calls(runtime: Runtime, clock: FakeClock) -> None:
    owner = await tenant(runtime)
    job_id = await submit(
        runtime,
        owner,
        provider="sim",
        max_attempts=5,
        body={
            "model": "sim-echo",
            "messages": [{"role": "user", "content": "x"}],
            "sim": {"fail_with": "rate_limit", "fail_times": 2, "retry_after_s": 0},
        },
    )
    worker = runtime.worker()
    states = []
    for _ in range(3):
        [job] = await worker.run_once()
        assert job is not None
        states.append((job.state, job.attempt))
        await make_due(runtime, clock, job_id)  # a rate limit waits at least a second
    assert states == [(JobState.QUEUED, 0), (JobState.QUEUED, 0), (JobState.SUCCEEDED, 1)]
    assert job is not None and job.id == job_id
