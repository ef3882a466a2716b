"""Calls a provider answers at once (providers.base.AnswersAtOnce: the simulator at zero
latency) run batch-wise, without a task per job: the same job states, events and ledger rows
as the task path, and the task path whenever a feature needs it. Both stores."""

from __future__ import annotations

import random
from typing import Any

import pytest

from jobgate import tracing
from jobgate.config import ProviderConfig
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.services.jobs import SubmitSpec
from jobgate.services.worker import Worker
from jobgate.storage.records import Finished, Tenant

CHAT = "/v1/chat/completions"
# One job per verdict class the simulator can give at once.
SHAPES: list[dict[str, Any]] = [
    {},  # succeeded, with usage billed once
    {"fail_with": "server_error", "fail_times": 1},  # retried
    {"fail_with": "rate_limit", "retry_after_s": 30},  # retried after the provider's pause
    {"fail_with": "invalid_request"},  # failed for good
    {"fail_with": "drop"},  # outcome unknown, safe to retry (in-process)
]


def _body(**sim: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    if sim:
        body["sim"] = sim
    return body


def _worker(runtime: Runtime, *, answer_now: bool) -> tuple[Worker, list[str]]:
    """A worker whose task-path runs (`execute`) are recorded by job id, with providers of
    its own: what one run tells the breakers and pauses does not steer the next."""
    providers = ProviderRegistry(
        {"sim": SimProvider("sim", clock=runtime.clock)},
        configs={"sim": ProviderConfig(kind="sim", model_prefixes=("sim-",))},
        default="sim",
        clock=runtime.clock,
    )
    worker = Worker(
        storage=runtime.storage,
        providers=providers,
        # Retries far enough away (on PostgreSQL, in real time) that the next run's claim
        # leases only the jobs submitted for it.
        settings=runtime.settings.model_copy(update={"retry_base_s": 60, "retry_max_s": 60}),
        clock=runtime.clock,
        worker_id="worker:test",
        limits=runtime.limits,
        answer_now=answer_now,
        rng=random.Random(7),  # the same retry delays on both paths
    )
    one_by_one: list[str] = []
    execute = worker.execute

    async def recorded(job: Job) -> Finished | None:
        one_by_one.append(job.id)
        return await execute(job)

    worker.execute = recorded  # type: ignore[method-assign]
    return worker, one_by_one


async def _submit(runtime: Runtime, owner: Tenant, body: dict[str, Any], **spec: Any) -> str:
    outcome = await runtime.jobs.submit(
        tenant_id=owner.id, spec=SubmitSpec(endpoint=CHAT, body=body, provider="sim", **spec)
    )
    return outcome.job.id


async def _trace(runtime: Runtime, job_id: str) -> dict[str, Any]:
    """What a run leaves behind for one job, without its id and the answer's random id."""
    job = await runtime.storage.job_get(job_id=job_id)
    assert job is not None
    events = await runtime.storage.job_events(job_id=job_id)
    ledger = await runtime.storage.usage_for_job(job_id=job_id)
    result = None if job.result is None else {k: v for k, v in job.result.items() if k != "id"}
    return {
        "state": job.state,
        "attempt": job.attempt,
        "run_count": job.run_count,
        "error": job.error,
        "result": result,
        "usage": job.usage,
        "retry_in": job.run_at - job.updated_at if job.state is JobState.QUEUED else None,
        "leased": (job.lease_owner, job.lease_token is not None),
        "events": [(e.seq, e.from_state, e.to_state, e.actor, e.reason, e.applied) for e in events],
        "ledger": [(u.kind, u.provider, u.model, u.input_tokens, u.output_tokens) for u in ledger],
    }


@pytest.fixture(autouse=True)
def spans_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """An earlier test may have set a global tracer provider (OpenTelemetry's is process-wide):
    these tests choose whether spans are recorded."""
    monkeypatch.setattr(tracing, "recording", lambda: False)


async def test_answered_at_once_leaves_what_the_task_path_leaves(runtime: Runtime) -> None:
    traces: dict[bool, list[dict[str, Any]]] = {}
    for answer_now in (False, True):
        owner = (await runtime.tenants.create(f"acme-{answer_now}")).tenant
        ids = [await _submit(runtime, owner, _body(**sim)) for sim in SHAPES]
        worker, one_by_one = _worker(runtime, answer_now=answer_now)
        done = await worker.run_once()
        assert [job.id for job in done if job is not None] == ids
        assert worker.inflight == 0 and worker.busy == 0
        # The batch-wise path ran every job without the task path, and only it.
        assert one_by_one == ([] if answer_now else ids)
        traces[answer_now] = [await _trace(runtime, job_id) for job_id in ids]
    assert traces[True] == traces[False]
    states = [trace["state"] for trace in traces[True]]
    assert states == [
        JobState.SUCCEEDED,
        JobState.QUEUED,
        JobState.QUEUED,
        JobState.FAILED,
        JobState.QUEUED,
    ]
    assert traces[True][0]["ledger"] and not traces[True][1]["ledger"]


async def test_the_task_path_runs_what_needs_it(runtime: Runtime) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    plain = await _submit(runtime, owner, _body())
    deadline = await _submit(runtime, owner, _body(), execution_timeout_s=60)
    streamed = await _submit(runtime, owner, _body(), stream=True)
    waits = await _submit(runtime, owner, _body(latency_s=0.001))  # no answer at once
    worker, one_by_one = _worker(runtime, answer_now=True)
    done = await worker.run_once()
    assert [job.state if job else None for job in done] == [JobState.SUCCEEDED] * 4
    assert sorted(one_by_one) == sorted([deadline, streamed, waits])
    assert plain not in one_by_one
    chunks = await runtime.storage.job_events(job_id=streamed)
    assert chunks[-1].to_state is JobState.SUCCEEDED


@pytest.mark.parametrize("answer_now", [False, True])
async def test_a_cancel_requested_before_the_call_is_honoured(
    runtime: Runtime, answer_now: bool
) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    job_id = await _submit(runtime, owner, _body())
    other = await _submit(runtime, owner, _body())
    worker, one_by_one = _worker(runtime, answer_now=answer_now)
    jobs = await worker.claim()
    await runtime.jobs.cancel(tenant_id=owner.id, job_id=job_id)
    await worker.heartbeat_once()  # learns of the cancel: the job's call is stopped
    done = await worker.run_claimed(jobs)
    assert [d.state if d else None for d in done] == [JobState.CANCELLED, JobState.SUCCEEDED]
    assert one_by_one == ([job_id] if answer_now else [job_id, other])
    job = await runtime.storage.job_get(job_id=job_id)
    assert job is not None and job.state is JobState.CANCELLED
    assert not await runtime.storage.usage_for_job(job_id=job_id)
    assert worker.inflight == 0


async def test_recorded_spans_keep_every_job_on_the_task_path(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    ids = [await _submit(runtime, owner, _body()) for _ in range(3)]
    monkeypatch.setattr(tracing, "recording", lambda: True)  # each call gets its span
    worker, one_by_one = _worker(runtime, answer_now=True)
    done = await worker.run_once()
    assert [job.state if job else None for job in done] == [JobState.SUCCEEDED] * 3
    assert sorted(one_by_one) == sorted(ids)
