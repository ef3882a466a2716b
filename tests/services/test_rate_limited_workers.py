"""Shared rate limits through the worker, on both backends: two workers with
separate storage connections draw on one budget; a job that must wait stays queued with no
lease and no attempt spent; token estimates are charged before the call and corrected by the
reported usage after it. SQLite runs on the fake clock; PostgreSQL on its own clock (real
time, steps of 0.1 s)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from jobgate import metrics
from jobgate.config import ModelLimits, ProviderConfig, Settings
from jobgate.domain import rate_limits as rules
from jobgate.domain.job import Job
from jobgate.domain.rate_limits import PROVIDER_WIDE, Bucket
from jobgate.domain.states import JobState
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.roles.worker import Worker
from jobgate.services import rate_limits
from jobgate.storage.postgres.store import is_postgres, postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import is_sqlite, sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio
STEP_S = 0.1


def registry(clock: FakeClock, **limits: object) -> ProviderRegistry:
    config = ProviderConfig(kind="sim", model_prefixes=("sim-",), **limits)
    return ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock)}, configs={"sim": config}, default="sim"
    )


@pytest.fixture
async def second(storage: Storage, clock: FakeClock) -> AsyncIterator[Storage]:
    """Another storage on the same database, as a second worker process would have."""
    other: Storage
    if is_postgres(storage):
        other = postgres_store(storage.engine.dsn, pool_size=2)
    else:
        assert is_sqlite(storage)
        other = sqlite_store(storage.engine.path, clock=clock)
    await other.open()
    yield other
    await other.close()


async def step(storage: Storage, clock: FakeClock) -> None:
    clock.advance(STEP_S)
    if is_postgres(storage):
        await asyncio.sleep(STEP_S)


def most_in_window(starts: list[datetime], window_s: float) -> int:
    times = sorted(t.timestamp() for t in starts)
    return max(
        (sum(1 for u in times if t <= u < t + window_s) for t in times),
        default=0,
    )


async def test_two_workers_share_one_rpm(
    storage: Storage, second: Storage, clock: FakeClock, settings: Settings
) -> None:
    tenant = await make_tenant(storage)
    for _ in range(20):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    providers = registry(clock, rpm=600)  # one start every 0.1 s, across both workers
    workers = [
        Worker(storage=s, providers=providers, settings=settings, clock=clock, worker_id=f"w{i}")
        for i, s in enumerate((storage, second))
    ]
    waits_before = metrics.RATE_LIMIT_WAITS.labels("sim", PROVIDER_WIDE)._value.get()
    claimed: list[Job] = []
    for _ in range(80):
        for batch in await asyncio.gather(*(w.claim() for w in workers)):
            claimed += batch
        if len(claimed) == 20:
            break
        await step(storage, clock)
    assert len({job.id for job in claimed}) == len(claimed) == 20
    started = [job.started_at for job in claimed if job.started_at is not None]
    # 10 a second, +1 for a start on the window's edge; never 2 x 10 (one per worker).
    assert most_in_window(started, 1.0) <= 11
    assert metrics.RATE_LIMIT_WAITS.labels("sim", PROVIDER_WIDE)._value.get() > waits_before


async def test_a_waiting_job_stays_queued_unleased(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    tenant = await make_tenant(storage)
    first = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    waiting = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    worker = Worker(storage=storage, providers=registry(clock, rpm=1), settings=settings)
    assert [job.id for job in await worker.claim()] == [first.id]
    assert await worker.claim() == []
    job = await storage.job_get(job_id=waiting.id)
    assert job is not None and job.state is JobState.QUEUED
    assert job.attempt == 0 and job.lease_token is None
    await rate_limits.refresh_gauges(storage, registry(clock, rpm=1).configs())
    assert metrics.RATE_LIMITED_JOBS.labels("sim", PROVIDER_WIDE)._value.get() == 1


async def test_model_limits_hold_one_model_back_not_the_others(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    tenant = await make_tenant(storage)
    slow = [
        (await submit_one(storage, job=new_job(tenant, model="sim-slow"), now=clock.now())).job
        for _ in range(3)
    ]
    free = [(await submit_one(storage, job=new_job(tenant), now=clock.now())).job for _ in range(3)]
    providers = registry(clock, model_limits={"sim-slow": ModelLimits(rpm=1)})
    worker = Worker(storage=storage, providers=providers, settings=settings)
    got = {job.id for job in await worker.claim()}
    got |= {job.id for job in await worker.claim()}
    assert got == {slow[0].id} | {job.id for job in free}


async def test_tokens_are_estimated_then_corrected_by_usage(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    tenant = await make_tenant(storage)
    request = {
        "model": "sim-echo",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 500,
    }
    job = (await submit_one(storage, job=new_job(tenant, request=request), now=clock.now())).job
    await submit_one(storage, job=new_job(tenant, request=request), now=clock.now())
    bucket = Bucket("sim", PROVIDER_WIDE, tpm=600)  # 10 tokens a second
    worker = Worker(storage=storage, providers=registry(clock, tpm=600), settings=settings)
    estimate = rules.estimate_tokens(request)
    assert estimate >= 500
    (claimed,) = await worker.claim()
    assert claimed.id == job.id
    assert await worker.claim() == []  # its estimate is a debt of 50 s and more
    owed = (await storage.rate_limit_waits(buckets=[bucket]))[("sim", PROVIDER_WIDE)]
    assert estimate / 10 - 2 <= owed <= estimate / 10
    done = await worker.execute(claimed)
    assert done is not None and done.state is JobState.SUCCEEDED
    finished = await storage.job_get(job_id=job.id)
    assert finished is not None
    used = rules.used_tokens(finished.usage)
    assert used is not None and used < estimate
    left = (await storage.rate_limit_waits(buckets=[bucket])).get(("sim", PROVIDER_WIDE), 0.0)
    assert left <= used / 10 + 0.01  # the debt is what the call really used


async def test_a_queued_job_shows_it_is_rate_limited(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    from jobgate.http import job_notes
    from jobgate.http.views import job_view
    from jobgate.process.runtime import Runtime

    tenant = await make_tenant(storage)
    for _ in range(2):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    providers = registry(clock, rpm=1)
    runtime = Runtime(settings, storage=storage, clock=clock, providers=providers)
    runtime.presence.local.add("worker")  # a worker runs in this process
    (running,) = await Worker(storage=storage, providers=providers, settings=settings).claim()
    (queued,) = await storage.job_list(tenant_id=tenant.id, states=[JobState.QUEUED])
    view = await job_notes.annotate(runtime.app_context(), queued, job_view(queued))
    assert view["phase"] == "rate_limited" and "sim" in view["note"]
    assert view["waiting"]["reason"] == "rate_limited"
    assert running.id != queued.id


async def test_a_second_process_cannot_pass_a_tpm_between_a_take_and_its_charge(
    storage: Storage, second: Storage, clock: FakeClock
) -> None:
    """Found against the enforcing simulator: with a tpm only, process A's take admitted,
    then process B's take admitted too before A charged its job's estimate, and the two calls
    together went past the provider's limit. The take now reserves tokens atomically."""
    configs = {"sim": ProviderConfig(kind="sim", model_prefixes=("sim-",), tpm=600)}
    first = rate_limits.RateLimiter(storage=storage, configs=configs)
    other = rate_limits.RateLimiter(storage=second, configs=configs)
    (target,) = first.targets("sim")
    assert await first.take(target) is not None
    assert await other.take(target) is None  # A's call is reserved for: B waits
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    await first.started(target, [job])  # the reservation becomes the job's estimate
    bucket = Bucket("sim", PROVIDER_WIDE, tpm=600)
    owed = (await storage.rate_limit_waits(buckets=[bucket]))[("sim", PROVIDER_WIDE)]
    estimate = rules.estimate_tokens(job.request)
    assert estimate / 10 - 2 <= owed <= estimate / 10 + 0.01  # the job's estimate, once
