"""Background mode end to end inside one process, on both backends, on a fake clock: the worker
creates at the provider and lets go, the reconciler settles from the provider's answer, and
every failure phase (unknown create, status check failed, completion handling failed, a worker
that died mid-create) is explicit and never creates the job twice by accident.

Storage is wrapped so that calls which leave the time to the database get the fake clock's
time instead, on PostgreSQL too (tests.support.clocked)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import CancelOutcome, Job, Lease
from jobgate.domain.states import JobState
from jobgate.providers.background import ProviderJobRef, Snapshot
from jobgate.providers.base import ProviderResult
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import RESPONSES, SimProvider
from jobgate.roles.reconciler import Reconciler
from jobgate.roles.worker import Worker
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.support.clocked import ClockedStorage

FIRST_CHECK_S = 30.0
DUE_S = 45.0  # comfortably past the first check


class FlakySim(SimProvider):
    """The in-process simulator with scripted trouble on status checks and result fetches."""

    def __init__(self, *args: Any, idempotent: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.idempotent_creates = idempotent
        self.failing_checks = 0
        self.failing_fetches = 0
        self.fetch_separately = False
        self.creates = 0

    async def create(self, call: Any) -> Snapshot:
        self.creates += 1
        return await super().create(call)

    async def retrieve(self, ref: ProviderJobRef) -> Snapshot:
        if self.failing_checks:
            self.failing_checks -= 1
            raise errors.ProviderRetryable("status check failed", status_code=502)
        snapshot = await super().retrieve(ref)
        if self.fetch_separately and snapshot.result is not None:
            return dataclasses.replace(snapshot, result=None, needs_result=True)
        return snapshot

    async def fetch_result(self, ref: ProviderJobRef, snapshot: Snapshot) -> ProviderResult:
        if self.failing_fetches:
            self.failing_fetches -= 1
            raise errors.ProviderRetryable("results file unavailable", status_code=503)
        fresh = await super().retrieve(ref)
        assert fresh.result is not None
        return fresh.result


@dataclasses.dataclass
class Rig:
    storage: Storage
    clock: FakeClock
    tenant: Tenant
    provider: FlakySim
    worker: Worker
    reconciler: Reconciler
    settings: Settings

    async def submit(self, *, sim: dict[str, Any] | None = None, **fields: Any) -> Job:
        body: dict[str, Any] = {"model": "sim-bg", "input": "background please"}
        if sim:
            body["sim"] = sim
        job = new_job(self.tenant, provider="bg", endpoint=RESPONSES, request=body, **fields)
        return (await submit_one(self.storage, job=job, now=self.clock.now())).job

    async def get(self, job_id: str) -> Job:
        job = await self.storage.job_get(job_id=job_id)
        assert job is not None
        return job

    async def start(self, *, sim: dict[str, Any] | None = None, **fields: Any) -> Job:
        """Submit and let a worker create it at the provider."""
        job = await self.submit(sim=sim, **fields)
        await self.worker.run_once()
        return await self.get(job.id)

    async def sweep_at(self, seconds_later: float) -> None:
        self.clock.advance(seconds_later)
        await self.reconciler.sweep_once(now=self.clock.now())


def make_rig(raw: Storage, clock: FakeClock, tenant: Tenant, **settings: Any) -> Rig:
    storage: Storage = ClockedStorage(raw, clock)
    config = ProviderConfig(kind="sim", mode="background", reconcile_after_s=FIRST_CHECK_S)
    merged = {"providers": {"bg": config}, "max_attempts": 2, **settings}
    settings_obj = Settings(**merged)
    provider = FlakySim("bg", clock=clock, background=True)
    registry = ProviderRegistry(
        {"bg": provider, "sim": SimProvider(clock=clock)},
        configs=settings_obj.all_providers(),
        default="sim",
        clock=clock,
    )
    worker = Worker(storage=storage, providers=registry, settings=settings_obj, clock=clock)
    reconciler = Reconciler(storage=storage, providers=registry, settings=settings_obj, clock=clock)
    return Rig(storage, clock, tenant, provider, worker, reconciler, settings_obj)


@pytest.fixture
async def rig(storage: Storage, clock: FakeClock) -> AsyncIterator[Rig]:
    yield make_rig(storage, clock, await make_tenant(storage))


async def test_worker_creates_and_lets_go_reconciler_settles(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 10})
    assert job.state is JobState.RUNNING and job.provider_job_id is not None
    assert job.lease_token is None and job.lease_expires_at is None  # no worker holds it
    assert (job.creation_outcome, job.phase) == ("accepted", "awaiting_provider")
    assert rig.worker.inflight == 0  # the worker slot is free again
    await rig.sweep_at(5)  # before the first check: nothing to do
    assert (await rig.get(job.id)).state is JobState.RUNNING
    await rig.sweep_at(DUE_S)
    done = await rig.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.completed_at == rig.clock.now()
    assert done.result is not None and done.result["status"] == "completed"
    assert "background please" in str(done.result["output"])
    assert [e.kind for e in await rig.storage.usage_for_job(job_id=job.id)] == ["completion"]
    assert rig.provider.creates == 1
    events = await rig.storage.job_events(job_id=job.id)
    assert [(e.to_state, e.actor) for e in events][-1] == (JobState.SUCCEEDED, "reconciler")


async def test_still_running_is_checked_again_with_backoff(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 10_000})
    await rig.sweep_at(DUE_S)
    first = await rig.storage.job_by_provider_job(
        provider="bg", provider_job_id=job.provider_job_id or ""
    )
    assert first is not None and first.reconcile_checks == 1
    assert first.provider_status == "in_progress"
    gap = (first.job.reconcile_at - rig.clock.now()).total_seconds()  # type: ignore[operator]
    assert 0.8 * 60 <= gap <= 1.2 * 60  # reconcile_after_s doubled, ±20%
    await rig.sweep_at(gap + 0.01)
    second = await rig.storage.job_by_provider_job(
        provider="bg", provider_job_id=job.provider_job_id or ""
    )
    assert second is not None and second.reconcile_checks == 2
    assert (second.job.reconcile_at - rig.clock.now()).total_seconds() >= 0.8 * 120  # type: ignore[operator]


async def test_status_check_failed_backs_off_and_never_recreates(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 1})
    rig.provider.failing_checks = 2
    await rig.sweep_at(DUE_S)
    item = await rig.storage.job_by_provider_job(
        provider="bg", provider_job_id=job.provider_job_id or ""
    )
    assert item is not None and item.job.state is JobState.RUNNING
    assert item.reconcile_failures == 1
    assert item.reconcile_error is not None
    assert item.reconcile_error["kind"] == "status_check_failed"
    await rig.sweep_at(10)
    await rig.sweep_at(10)
    done = await rig.get(job.id)
    assert done.state is JobState.SUCCEEDED
    assert rig.provider.creates == 1  # a failed status check never creates the job again


async def test_completion_handling_failed_is_retried(rig: Rig) -> None:
    rig.provider.fetch_separately = True
    rig.provider.failing_fetches = 1
    job = await rig.start(sim={"latency_s": 1})
    await rig.sweep_at(DUE_S)
    item = await rig.storage.job_by_provider_job(
        provider="bg", provider_job_id=job.provider_job_id or ""
    )
    assert item is not None and item.job.state is JobState.RUNNING
    assert item.reconcile_error is not None
    assert item.reconcile_error["kind"] == "completion_handling_failed"
    await rig.sweep_at(10)
    assert (await rig.get(job.id)).state is JobState.SUCCEEDED
    assert rig.provider.creates == 1


async def test_failure_at_the_provider_is_retried_then_dead_lettered(rig: Rig) -> None:
    job = await rig.start(sim={"outcome": "failed"}, max_attempts=2)
    await rig.sweep_at(DUE_S)
    retried = await rig.get(job.id)
    assert retried.state is JobState.QUEUED and retried.provider_job_id is None
    assert retried.error is not None and retried.error["code"] == "server_error"
    rig.clock.advance(rig.settings.retry_max_s)
    await rig.worker.run_once()
    again = await rig.get(job.id)
    assert again.attempt == 2 and again.provider_job_id is not None
    await rig.sweep_at(DUE_S)
    final = await rig.get(job.id)
    assert final.state is JobState.FAILED and final.dead_lettered
    assert final.error is not None and final.error["code"] == "server_error"
    assert rig.provider.creates == 2


async def test_cancel_at_the_provider(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 100})
    await rig.storage.job_cancel(job_id=job.id, tenant_id=rig.tenant.id, actor="api")
    rig.clock.advance(0.1)
    await rig.reconciler.sweep_once(now=rig.clock.now())  # due at once: the cancel request
    done = await rig.get(job.id)
    assert done.state is JobState.CANCELLED
    assert done.cancel_outcome == CancelOutcome.AT_PROVIDER
    assert rig.provider.engine.cancel_calls == [job.provider_job_id]


async def test_cancel_too_late_keeps_the_real_result(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 1})
    rig.clock.advance(2)  # finished at the provider, not yet settled here
    await rig.storage.job_cancel(job_id=job.id, tenant_id=rig.tenant.id, actor="api")
    await rig.reconciler.sweep_once(now=rig.clock.now())
    done = await rig.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.result is not None
    assert done.cancel_outcome == CancelOutcome.TOO_LATE


async def test_cancel_refused_after_completion_settles_with_the_result_once(rig: Rig) -> None:
    """The realistic provider answers 400 "Cannot cancel a completed response" (in process,
    unconverted by any adapter): the reconciler retrieves and settles too late, and never
    sends the cancel again (it looped, the job stuck in running)."""
    job = await rig.start(sim={"latency_s": 1})
    rig.clock.advance(2)
    await rig.storage.job_cancel(job_id=job.id, tenant_id=rig.tenant.id, actor="api")
    for _ in range(3):
        await rig.sweep_at(DUE_S)
    done = await rig.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.result is not None
    assert done.cancel_outcome == CancelOutcome.TOO_LATE
    assert rig.provider.engine.cancel_calls == [job.provider_job_id]  # one cancel, refused


async def test_deadline_after_the_provider_finished_keeps_the_result(rig: Rig) -> None:
    """The deadline path meets the same 400: the provider finished first, so its result
    stands (it was a 400 every sweep and a stuck job)."""
    job = await rig.start(sim={"latency_s": 10}, execution_timeout_s=20)
    await rig.sweep_at(DUE_S)  # past the deadline, and finished at the provider long ago
    done = await rig.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.result is not None
    assert len(rig.provider.engine.cancel_calls) <= 1


async def test_a_quota_error_at_create_fails_the_job_at_once(rig: Rig) -> None:
    job = await rig.start(sim={"fail_with": "quota"})
    assert job.state is JobState.FAILED and not job.dead_lettered
    assert job.error is not None and job.error["code"] == "insufficient_quota"
    assert job.attempt == 1


async def test_cancel_not_supported_discards_and_refunds(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 30, "cancel": "unsupported"})
    await rig.storage.job_cancel(job_id=job.id, tenant_id=rig.tenant.id, actor="api")
    await rig.reconciler.sweep_once(now=rig.clock.now())
    cancelled = await rig.get(job.id)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.cancel_outcome == CancelOutcome.NOT_SUPPORTED
    assert await rig.storage.usage_for_job(job_id=job.id) == []
    for _ in range(4):  # watched until the provider finishes
        await rig.sweep_at(DUE_S)
    final = await rig.get(job.id)
    assert final.state is JobState.CANCELLED and final.result is None
    ledger = {e.kind: e for e in await rig.storage.usage_for_job(job_id=job.id)}
    assert set(ledger) == {"completion", "refund"}
    assert ledger["refund"].output_tokens == ledger["completion"].output_tokens > 0
    last = (await rig.storage.job_events(job_id=job.id))[-1]
    assert (last.to_state, last.applied) == (JobState.SUCCEEDED, False)
    assert final.reconcile_at is None


async def test_cancel_before_the_provider_accepted(rig: Rig) -> None:
    job = await rig.submit()
    cancelled = await rig.storage.job_cancel(job_id=job.id, tenant_id=rig.tenant.id, actor="api")
    assert cancelled is not None and cancelled.state is JobState.CANCELLED
    assert cancelled.cancel_outcome == CancelOutcome.NOT_STARTED
    await rig.worker.run_once()
    assert rig.provider.creates == 0


async def test_deadline_cancels_at_the_provider_and_fails(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 10_000}, execution_timeout_s=20)
    await rig.sweep_at(DUE_S)
    done = await rig.get(job.id)
    assert done.state is JobState.FAILED
    assert done.error == {
        "code": "deadline_exceeded",
        "message": "the job ran past its execution deadline",
        "type": "timeout_error",  # the same body from the worker, the reaper and the reconciler
    }
    assert rig.provider.engine.cancel_calls == [job.provider_job_id]


@pytest.mark.parametrize("policy", ["fail", "retry"])
async def test_unknown_create_outcome_follows_the_policy(
    storage: Storage, clock: FakeClock, policy: str
) -> None:
    rig = make_rig(storage, clock, await make_tenant(storage), unknown_outcome=policy)
    rig.provider.idempotent_creates = False
    job = await rig.start(sim={"fail_with": "drop", "fail_times": 1})
    if policy == "fail":
        assert job.state is JobState.FAILED and job.creation_outcome == "unknown"
        assert job.error is not None and job.error["code"] == "creation_outcome_unknown"
        return
    assert job.state is JobState.QUEUED and job.creation_outcome == "unknown"
    clock.advance(rig.settings.retry_max_s)
    await rig.worker.run_once()
    assert (await rig.get(job.id)).creation_outcome == "accepted"


async def test_unknown_create_is_retried_when_the_provider_dedupes(rig: Rig) -> None:
    job = await rig.start(sim={"fail_with": "drop", "fail_times": 1})  # idempotent by default
    assert job.state is JobState.QUEUED and job.creation_outcome == "unknown"


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_worker_that_died_mid_create(
    storage: Storage, clock: FakeClock, idempotent: bool
) -> None:
    rig = make_rig(storage, clock, await make_tenant(storage))
    rig.provider.idempotent_creates = idempotent
    await rig.submit()
    (claimed,) = await rig.worker.claim()
    await storage.job_provider_submitting(lease=Lease(claimed.id, claimed.lease_token or ""))
    # The process dies here: its lease runs out and the reaper hands the job back.
    clock.advance(rig.settings.lease_ttl_s + 30)
    await storage.job_reap_expired(limit=10, retry_delay=lambda _: 0, now=clock.now())
    requeued = await rig.get(claimed.id)
    assert requeued.state is JobState.QUEUED and requeued.creation_outcome == "sending"
    rig.worker._inflight.clear()  # the dead worker's bookkeeping died with it
    await rig.worker.run_once()
    after = await rig.get(claimed.id)
    if idempotent:
        assert after.creation_outcome == "accepted"  # sent again: the provider dedupes
    else:
        assert after.state is JobState.FAILED and after.creation_outcome == "unknown"
        assert rig.provider.creates == 0


async def test_refresh_after_restart(rig: Rig) -> None:
    first = await rig.start(sim={"latency_s": 1})
    second = await rig.start(sim={"latency_s": 1})
    rig.clock.advance(5)  # both finished at the provider; their checks are not yet due
    restarted = Reconciler(
        storage=rig.storage, providers=rig.worker._providers, settings=rig.settings,
        clock=rig.clock,
    )  # fmt: skip
    assert await restarted.refresh(now=rig.clock.now()) == 2
    result = await restarted.sweep_once(now=rig.clock.now())
    assert sorted(result.settled) == sorted([first.id, second.id])


async def test_a_server_that_ignores_background_is_settled_from_the_create(
    storage: Storage, clock: FakeClock
) -> None:
    """An OpenAI-compatible server that answers `background: true` with the finished response
    (and keeps nothing to retrieve later): the worker settles the job from that answer."""
    from jobgate.providers.openai import OpenAIProvider
    from jobgate.simulator import wire

    seen: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.method != "POST":
            return httpx.Response(404, json={"error": {"message": "not stored"}})
        body = orjson.loads(request.content)
        answer = wire.response_object(
            body, response_id="resp_sync", created_at=1, status="completed", completed_at=2
        )
        return httpx.Response(200, json=answer)

    config = ProviderConfig(kind="openai", base_url="http://compatible.test/v1", mode="background")
    settings = Settings(providers={"compatible": config})
    provider = OpenAIProvider("compatible", config, transport=httpx.MockTransport(server))
    registry = ProviderRegistry(
        {"compatible": provider}, configs=settings.all_providers(), default="sim", clock=clock
    )
    clocked: Storage = ClockedStorage(storage, clock)
    worker = Worker(storage=clocked, providers=registry, settings=settings, clock=clock)
    tenant = await make_tenant(storage)
    body = {"model": "local-model", "input": "now please"}
    job = new_job(tenant, provider="compatible", endpoint=RESPONSES, request=body)
    await submit_one(clocked, job=job)
    (done,) = await worker.run_once()
    await provider.aclose()
    assert done is not None and done.state is JobState.SUCCEEDED
    assert done.creation_outcome == "accepted" and done.result is not None
    assert seen == ["POST /v1/responses"]  # no status check was needed


async def test_a_bug_while_reconciling_defers_the_job_and_spares_the_pass(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 1})
    other = await rig.start(sim={"latency_s": 1})
    original = rig.provider.retrieve

    async def broken(ref: ProviderJobRef) -> Snapshot:
        if ref.job_id == job.id:
            raise KeyError("a bug")
        return await original(ref)

    rig.provider.retrieve = broken  # type: ignore[method-assign]
    rig.clock.advance(DUE_S)
    result = await rig.reconciler.sweep_once(now=rig.clock.now())
    assert result.settled == [other.id] and result.failed_checks == [job.id]
    item = await rig.storage.job_by_provider_job(
        provider="bg", provider_job_id=job.provider_job_id or ""
    )
    assert item is not None and item.job.state is JobState.RUNNING
    assert item.reconcile_error is not None and item.reconcile_error["code"] == "internal_error"


async def test_a_job_the_provider_lost_fails_and_is_not_recreated(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 1})
    rig.provider.engine._responses.clear()  # e.g. the in-process simulator restarted
    for _ in range(3):
        await rig.sweep_at(600)
    lost = await rig.get(job.id)
    assert lost.state is JobState.FAILED
    assert lost.error is not None and lost.error["code"] == "provider_job_not_found"
    assert rig.provider.creates == 1
