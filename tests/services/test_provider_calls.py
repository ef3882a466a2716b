"""The worker's verdicts on real provider calls (the OpenAI and Anthropic adapters against the
simulator server over HTTP), and per-provider backpressure: Retry-After reschedules without
burning an attempt, the circuit breaker holds a failing provider's jobs in the queue, and the
concurrency cap bounds calls in flight."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.providers import gates
from jobgate.providers.registry import ProviderRegistry
from jobgate.roles.reconciler import Reconciler
from jobgate.roles.worker import Worker
from jobgate.simulator.server import Simulator
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from jobgate.testing import FakeClock
from tests.e2e.gateway import eventually
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.support.clocked import ClockedStorage

MESSAGES = [{"role": "user", "content": "hi"}]
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": ("/v1/chat/completions", {"model": "gpt-sim", "messages": MESSAGES}),
    "anthropic": ("/v1/messages", {"model": "claude-sim", "max_tokens": 32, "messages": MESSAGES}),
}


@pytest.fixture
async def simulator() -> AsyncIterator[Simulator]:
    async with Simulator() as sim:
        yield sim


@dataclasses.dataclass
class Rig:
    storage: Storage
    clock: FakeClock
    tenant: Tenant
    worker: Worker
    registry: ProviderRegistry
    settings: Settings

    async def submit(self, kind: str, *, sim: dict[str, Any] | None = None, **fields: Any) -> Job:
        endpoint, body = BODIES[kind]
        request = {**body, **({"sim": sim} if sim else {})}
        job = new_job(self.tenant, provider=kind, endpoint=endpoint, request=request, **fields)
        return (await submit_one(self.storage, job=job)).job

    async def get(self, job_id: str) -> Job:
        job = await self.storage.job_get(job_id=job_id)
        assert job is not None
        return job


async def make_rig(
    raw: Storage, clock: FakeClock, simulator: Simulator, *, config: dict[str, Any] | None = None,
    **settings: Any,
) -> Rig:  # fmt: skip
    storage: Storage = ClockedStorage(raw, clock)
    extra = config or {}
    providers = {
        "openai": ProviderConfig(kind="openai", base_url=simulator.openai_base_url, **extra),
        "anthropic": ProviderConfig(
            kind="anthropic", base_url=simulator.anthropic_base_url, **extra
        ),
    }
    settings_obj = Settings(providers=providers, retry_base_s=1, retry_max_s=1, **settings)
    registry = ProviderRegistry.from_settings(settings_obj, clock=clock)
    worker = Worker(storage=storage, providers=registry, settings=settings_obj, clock=clock)
    return Rig(storage, clock, await make_tenant(storage), worker, registry, settings_obj)


@pytest.fixture
async def rig(
    storage: Storage,
    clock: FakeClock,
    simulator: Simulator,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Rig]:
    marker = request.node.get_closest_marker("config")
    built = await make_rig(storage, clock, simulator, **(marker.kwargs if marker else {}))
    yield built
    await built.registry.aclose()


KINDS = pytest.mark.parametrize("kind", ["openai", "anthropic"])


@KINDS
async def test_success(rig: Rig, kind: str) -> None:
    job = await rig.submit(kind)
    (done,) = await rig.worker.run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    assert "echo: hi" in str(done.result) and done.usage is not None
    assert [e.kind for e in await rig.storage.usage_for_job(job_id=job.id)] == ["completion"]


@KINDS
async def test_rate_limit_reschedules_without_burning_an_attempt(rig: Rig, kind: str) -> None:
    job = await rig.submit(
        kind, sim={"fail_with": "rate_limit", "retry_after_s": 7, "fail_times": 1}
    )
    (limited,) = await rig.worker.run_once()
    assert limited is not None and limited.state is JobState.QUEUED
    assert limited.attempt == 0  # refunded
    waited_s = (limited.run_at - rig.clock.now()).total_seconds()
    assert 7 <= waited_s <= 7 * 1.2  # as asked, spread by up to a fifth more
    assert limited.error is not None and limited.error["code"] == "rate_limit_exceeded"
    # The provider asked for 7 s: this worker claims nothing of it before then.
    assert await rig.worker.claim() == []
    rig.clock.advance(waited_s + 0.001)  # a stored time may read back a microsecond early
    (done,) = await rig.worker.run_once()
    assert done is not None and done.state is JobState.SUCCEEDED and done.attempt == 1
    assert done.id == job.id


@KINDS
async def test_server_error_then_success(rig: Rig, kind: str) -> None:
    await rig.submit(kind, sim={"fail_with": "server_error", "fail_times": 1})
    (retried,) = await rig.worker.run_once()
    assert retried is not None and retried.state is JobState.QUEUED and retried.attempt == 1
    assert retried.error is not None and retried.error["status_code"] == 500
    rig.clock.advance(1)
    (done,) = await rig.worker.run_once()
    assert done is not None and done.state is JobState.SUCCEEDED and done.attempt == 2


@KINDS
async def test_invalid_request_fails_at_once(rig: Rig, kind: str) -> None:
    await rig.submit(kind, sim={"fail_with": "invalid_request"})
    (failed,) = await rig.worker.run_once()
    assert failed is not None and failed.state is JobState.FAILED and failed.attempt == 1
    assert failed.error is not None and failed.error["status_code"] == 400
    assert failed.error["type"] == "invalid_request_error"


@KINDS
@pytest.mark.config(config={"request_timeout_s": 0.5})
async def test_hang_past_the_timeout_is_not_retried_blindly(rig: Rig, kind: str) -> None:
    await rig.submit(kind, sim={"fail_with": "hang"})
    (failed,) = await rig.worker.run_once()
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.creation_outcome == "unknown"
    assert failed.error is not None and failed.error["code"] == "creation_outcome_unknown"


@KINDS
@pytest.mark.config(config={"request_timeout_s": 0.5}, unknown_outcome="retry")
async def test_hang_with_the_retry_policy(rig: Rig, kind: str) -> None:
    await rig.submit(kind, sim={"fail_with": "hang", "fail_times": 1})
    (retried,) = await rig.worker.run_once()
    assert retried is not None and retried.state is JobState.QUEUED
    assert retried.creation_outcome == "unknown"
    rig.clock.advance(1)
    (done,) = await rig.worker.run_once()
    assert done is not None and done.state is JobState.SUCCEEDED


@KINDS
async def test_drop_after_accept_fails_with_unknown_outcome(
    rig: Rig,
    kind: str,
    simulator: Simulator,
) -> None:
    await rig.submit(kind, sim={"fail_with": "drop"})
    (failed,) = await rig.worker.run_once()
    assert failed is not None and failed.state is JobState.FAILED
    assert failed.creation_outcome == "unknown"
    assert len(simulator.engine.created) == 1  # the provider ran it once; we do not again


@KINDS
@pytest.mark.config(config={"idempotent_creates": True})
async def test_drop_after_accept_with_an_idempotent_provider(
    rig: Rig,
    kind: str,
    simulator: Simulator,
) -> None:
    simulator.engine.idempotent = True  # a provider that really deduplicates (not the real ones)
    await rig.submit(kind, sim={"fail_with": "drop", "fail_times": 1})
    (retried,) = await rig.worker.run_once()
    assert retried is not None and retried.state is JobState.QUEUED
    rig.clock.advance(1)
    (done,) = await rig.worker.run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    assert simulator.engine.created == [done.result["id"]]  # type: ignore[index]


@pytest.mark.config(config={"breaker_failure_threshold": 2, "breaker_reset_s": 30})
async def test_breaker_holds_a_failing_providers_jobs_in_the_queue(rig: Rig) -> None:
    for _ in range(4):
        await rig.submit("openai", sim={"fail_with": "server_error"}, max_attempts=10)
    await rig.worker.run_once(limit=1)
    await rig.worker.run_once(limit=1)
    breaker = rig.registry.gates.gate("openai").breaker  # type: ignore[union-attr]
    assert breaker.state == gates.OPEN
    rig.clock.advance(5)  # past the retry delay: the jobs are claimable, the provider is not
    other = await rig.submit("anthropic")
    claimed = await rig.worker.claim()
    assert [j.id for j in claimed] == [other.id]  # only the healthy provider's job
    await rig.worker.execute(claimed[0])
    rig.clock.advance(31)  # half-open: exactly one probe
    probe = await rig.worker.claim()
    assert [j.provider for j in probe] == ["openai"]
    await rig.worker.execute(probe[0])  # the probe fails: open again, for twice as long
    assert breaker.state == gates.OPEN
    rig.clock.advance(31)
    assert await rig.worker.claim() == []
    good = await rig.submit("openai", priority=0)
    rig.clock.advance(30)
    (probe_job,) = await rig.worker.claim()
    assert probe_job.id == good.id
    assert (await rig.worker.execute(probe_job)).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    assert breaker.state == gates.CLOSED
    assert len(await rig.worker.claim()) == 4  # the held jobs flow again


@pytest.mark.config(config={"concurrency": 2})
async def test_concurrency_cap_bounds_calls_in_flight(
    rig: Rig,
    simulator: Simulator,
) -> None:
    jobs = [await rig.submit("openai", sim={"latency_s": 0.2}) for _ in range(6)]
    runner = asyncio.create_task(rig.worker.run())
    try:
        async with asyncio.timeout(30):
            while True:
                states = [(await rig.get(j.id)).state for j in jobs]
                if all(s is JobState.SUCCEEDED for s in states):
                    break
                assert rig.worker.inflight <= 2
                await asyncio.sleep(0.05)
    finally:
        rig.worker.request_stop()
        await runner
    assert simulator.max_concurrent <= 2


async def test_anthropic_batch_job_through_worker_and_reconciler(
    rig: Rig, simulator: Simulator
) -> None:
    params = {"model": "claude-sim", "max_tokens": 16}
    body = {
        "requests": [
            {
                "custom_id": "a",
                "params": {**params, "messages": [{"role": "user", "content": "x"}]},
            },
            {
                "custom_id": "b",
                "params": {**params, "messages": [{"role": "user", "content": "y"}]},
            },
        ],
        "sim": {"latency_s": 0.2},
    }
    job = new_job(rig.tenant, provider="anthropic", endpoint="/v1/messages/batches", request=body)
    await submit_one(rig.storage, job=job)
    (accepted,) = await rig.worker.run_once()
    assert accepted is not None and accepted.state is JobState.RUNNING
    assert (accepted.provider_job_id or "").startswith("msgbatch_")
    reconciler = Reconciler(
        storage=rig.storage, providers=rig.registry, settings=rig.settings, clock=rig.clock
    )

    async def ended() -> bool:
        batches = simulator.engine.message_batches
        batch = batches.retrieve(accepted.provider_job_id or "", base_url="")
        return bool(batch["processing_status"] == "ended")

    await eventually(ended)
    rig.clock.advance(60)
    await reconciler.sweep_once()
    done = await rig.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.result is not None
    assert [r["custom_id"] for r in done.result["results"]] == ["a", "b"]
    ledger = await rig.storage.usage_for_job(job_id=job.id)
    assert [e.kind for e in ledger] == ["completion"] and ledger[0].output_tokens > 0
