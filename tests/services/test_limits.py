"""Limits in force: admission at submit, fair and capped claims, budgets, retention."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any, cast

import pytest

from jobgate import errors
from jobgate.config import ModelPrice, ProviderConfig, Settings, TenantLimits
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.services import limits as limits_module
from jobgate.services import submit_many
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.protocol import Storage
from jobgate.storage.records import LimitOverrides, QueueCounts, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import queued

CHAT = "/v1/chat/completions"
# USD per million tokens of the simulator's sim-echo; its other models have no price.
ECHO_PRICE = ModelPrice(input_per_mtok=Decimal("1000"), output_per_mtok=Decimal("2500.5"))


def chat(text: str = "hi", **extra: object) -> SubmitSpec:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": text}], **extra}
    return SubmitSpec(endpoint=CHAT, body=body)


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        retry_base_s=0.05,
        retry_max_s=0.05,
        shutdown_grace_s=0,
        max_queued_total=50,
        tenants={"toml": TenantLimits(max_queued=3, allowed_models=("sim-echo",))},
        providers={
            "sim": ProviderConfig(
                kind="sim", model_prefixes=("sim-",), prices={"sim-echo": ECHO_PRICE}
            )
        },
    )


async def test_toml_limits_and_database_overrides(runtime: Runtime) -> None:
    owner = (await runtime.tenants.create("toml")).tenant
    limits = await runtime.limits.for_tenant(owner.id)
    assert limits.max_queued == 3 and limits.allowed_models == ("sim-echo",)
    await runtime.storage.tenant_limits_set(
        tenant_id=owner.id, overrides=LimitOverrides(max_queued=5)
    )
    runtime.limits.invalidate()
    assert (await runtime.limits.for_tenant(owner.id)).max_queued == 5


async def test_disallowed_model_is_refused_naming_the_limit(runtime: Runtime) -> None:
    owner = (await runtime.tenants.create("toml")).tenant
    spec = SubmitSpec(
        endpoint=CHAT, body={"model": "sim-big", "messages": [{"role": "user", "content": "x"}]}
    )
    with pytest.raises(errors.LimitExceeded) as caught:
        await runtime.jobs.submit(tenant_id=owner.id, spec=spec)
    assert caught.value.limit == "allowed_models"
    assert await runtime.storage.job_list(tenant_id=owner.id) == []


async def test_output_tokens_are_clamped_before_storing(runtime: Runtime) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    await runtime.storage.tenant_limits_set(
        tenant_id=owner.id, overrides=LimitOverrides(max_output_tokens=64)
    )
    outcome = await runtime.jobs.submit(tenant_id=owner.id, spec=chat(max_tokens=5000))
    assert outcome.job.request is not None and outcome.job.request["max_tokens"] == 64


async def test_full_queue_is_429_with_retry_after_and_stores_nothing(
    runtime: Runtime, clock: FakeClock
) -> None:
    owner = (await runtime.tenants.create("toml")).tenant
    for i in range(3):
        await runtime.jobs.submit(tenant_id=owner.id, spec=chat(str(i)), idempotency_key=f"k{i}")
    clock.advance(1.1)  # queue counts are sampled once a second
    with pytest.raises(errors.QueueFull) as caught:
        await runtime.jobs.submit(tenant_id=owner.id, spec=chat("one too many"))
    assert caught.value.limit == "max_queued" and 1 <= caught.value.retry_after_s <= 120
    assert await queued(runtime.storage, owner.id) == 3
    replay = await runtime.jobs.submit(tenant_id=owner.id, spec=chat("0"), idempotency_key="k0")
    assert replay.replayed
    # Workers drain 2 jobs over 10 s: the next refusal says how long one slot takes.
    clock.advance(1.5)
    await runtime.worker().run_once(limit=2)
    clock.advance(10)
    for i in range(2):
        await runtime.jobs.submit(tenant_id=owner.id, spec=chat(f"refill {i}"))
    clock.advance(1.5)
    with pytest.raises(errors.QueueFull) as caught:
        await runtime.jobs.submit(tenant_id=owner.id, spec=chat("again"))
    assert caught.value.retry_after_s == pytest.approx(7, abs=2)  # 1 job at ~2/13 per s


async def test_everyones_bound(runtime: Runtime, clock: FakeClock) -> None:
    owners = [(await runtime.tenants.create(f"t{i}")).tenant for i in range(6)]
    for owner in owners:
        for i in range(9):
            await runtime.jobs.submit(tenant_id=owner.id, spec=chat(str(i)))
            if (await runtime.storage.queue_counts()).queued_total >= 50:
                break
    clock.advance(1.1)  # queue counts are sampled once a second
    with pytest.raises(errors.QueueFull) as caught:
        await runtime.jobs.submit(tenant_id=owners[-1].id, spec=chat("over"))
    assert caught.value.limit == "max_queued_total"


async def test_budget_exhaustion_stops_claims_for_that_tenant_only(runtime: Runtime) -> None:
    spender = (await runtime.tenants.create("spender")).tenant
    saver = (await runtime.tenants.create("saver")).tenant
    await runtime.storage.tenant_limits_set(
        tenant_id=spender.id, overrides=LimitOverrides(daily_token_budget=5)
    )
    await runtime.jobs.submit(tenant_id=spender.id, spec=chat("spend it all"))
    worker = runtime.worker()
    [done] = await worker.run_once()
    assert done is not None and done.state is JobState.SUCCEEDED  # under budget when claimed
    await runtime.jobs.submit(tenant_id=spender.id, spec=chat("more"))
    await runtime.jobs.submit(tenant_id=saver.id, spec=chat("mine"))
    runtime.limits.invalidate()
    claimed = await worker.run_once()
    assert [j.tenant_id for j in claimed if j is not None] == [saver.id]
    assert await queued(runtime.storage, spender.id) == 1


async def test_cost_budget_exhaustion_stops_claims_for_that_tenant_only(
    runtime: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def database_now() -> datetime:
        return clock.now()

    # The budget day is the database's (PostgreSQL's clock would not follow the fake one).
    monkeypatch.setattr(runtime.storage, "database_now", database_now)
    spender = (await runtime.tenants.create("spender")).tenant
    saver = (await runtime.tenants.create("saver")).tenant
    await runtime.jobs.submit(tenant_id=spender.id, spec=chat("spend it all"))
    worker = runtime.worker()
    [done] = await worker.run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    [billed] = await runtime.storage.usage_for_job(job_id=done.id)
    cost = (
        billed.input_tokens * ECHO_PRICE.input_per_mtok
        + billed.output_tokens * ECHO_PRICE.output_per_mtok
    ) / 1_000_000
    assert cost > 0 and await runtime.limits.spend_today() == {spender.id: cost}
    # Both may spend exactly what the spender has spent: the spender has reached its budget.
    for tenant in (spender, saver):
        await runtime.storage.tenant_limits_set(
            tenant_id=tenant.id, overrides=LimitOverrides(daily_cost_budget_usd=float(cost))
        )
    await runtime.jobs.submit(tenant_id=spender.id, spec=chat("more"))
    await runtime.jobs.submit(tenant_id=saver.id, spec=chat("mine"))
    runtime.limits.invalidate()
    claimed = await worker.run_once()
    assert [j.tenant_id for j in claimed if j is not None] == [saver.id]
    assert await queued(runtime.storage, spender.id) == 1
    clock.advance(60)  # a later refresh, the same day: still paused
    assert await worker.run_once() == []
    # A new UTC day, a new budget.
    tomorrow = clock.now().date() + timedelta(days=1)
    clock.set(datetime.combine(tomorrow, time(0), tzinfo=UTC))
    claimed = await worker.run_once()
    assert [j.tenant_id for j in claimed if j is not None] == [spender.id]


async def test_unpriced_usage_costs_nothing_and_is_logged_once_per_model(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    await runtime.storage.tenant_limits_set(
        tenant_id=owner.id, overrides=LimitOverrides(daily_cost_budget_usd=0.000001)
    )
    other = SubmitSpec(
        endpoint=CHAT, body={"model": "sim-other", "messages": [{"role": "user", "content": "x"}]}
    )
    worker = runtime.worker()
    caplog.set_level(logging.WARNING, logger="jobgate.services.limits")
    for _ in range(3):
        await runtime.jobs.submit(tenant_id=owner.id, spec=other)
        runtime.limits.invalidate()
        [done] = await worker.run_once()  # never over budget: the usage has no price
        assert done is not None and done.state is JobState.SUCCEEDED
    assert await runtime.limits.spend_today() == {owner.id: 0}
    unpriced = [r for r in caplog.records if "without a configured price" in r.getMessage()]
    assert [(r.__dict__["provider"], r.__dict__["model"]) for r in unpriced] == [
        ("sim", "sim-other")
    ]


async def test_caps_come_from_limits(runtime: Runtime) -> None:
    owner = (await runtime.tenants.create("capped")).tenant
    await runtime.storage.tenant_limits_set(
        tenant_id=owner.id, overrides=LimitOverrides(max_running=2)
    )
    for i in range(5):
        await runtime.jobs.submit(tenant_id=owner.id, spec=chat(str(i)))
    claimed = await runtime.worker(concurrency=10).claim()
    assert len(claimed) == 2


async def test_reaper_applies_retention(runtime: Runtime, clock: FakeClock) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    job = (await runtime.jobs.submit(tenant_id=owner.id, spec=chat())).job
    await runtime.jobs.cancel(tenant_id=owner.id, job_id=job.id)
    reaper = runtime.reaper()
    assert (await reaper.reap_once(now=clock.now())).purged == 0
    later = clock.advance(runtime.settings.retention_s + 120)  # past PostgreSQL's own clock too
    # Past the retention period the finished job is deleted with its log, before
    # the purge would rewrite it: nothing is left to purge.
    reaped = await reaper.reap_once(now=later)
    assert (reaped.deleted, reaped.purged) == (1, 0)
    with pytest.raises(errors.NotFound):
        await runtime.jobs.get(tenant_id=owner.id, job_id=job.id)
    assert await runtime.storage.job_events(job_id=job.id) == []


async def test_a_batched_submit_is_all_or_nothing_against_the_queue_bound(
    runtime: Runtime,
) -> None:
    owner = (await runtime.tenants.create("toml")).tenant
    stored = await runtime.jobs.submit_many(tenant_id=owner.id, specs=[chat("a"), chat("b")])
    assert [job.state for job in stored] == [JobState.QUEUED, JobState.QUEUED]
    with pytest.raises(errors.QueueFull):  # 2 queued + 2 > max_queued 3: none stored
        await runtime.jobs.submit_many(tenant_id=owner.id, specs=[chat("c"), chat("d")])
    assert await queued(runtime.storage, owner.id) == 2
    with pytest.raises(errors.InvalidRequest):  # a bad job refuses the batch before storing
        await runtime.jobs.submit_many(
            tenant_id=owner.id, specs=[chat("e"), SubmitSpec(endpoint=CHAT, body={})]
        )
    assert await queued(runtime.storage, owner.id) == 2


async def _until_stuck(tasks: list[asyncio.Task[Any]]) -> None:
    """Let every task run as far as it can (no timing: a bounded number of loop turns)."""
    for _ in range(50):
        await asyncio.sleep(0)
    assert not any(task.done() for task in tasks)


async def test_concurrent_submits_share_one_refresh_of_each_cache(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At thousands of submits a second, every request in flight when a cache expires found
    it stale: each sent its own count of the whole queue (and read every tenant's limits).
    Now the first refreshes and the others wait for it."""
    owner = (await runtime.tenants.create("toml")).tenant
    storage = runtime.storage
    calls: collections.Counter[str] = collections.Counter()
    release = asyncio.Event()

    def gated(name: str) -> Callable[[], Awaitable[Any]]:
        real = getattr(storage, name)

        async def call() -> Any:
            calls[name] += 1
            await release.wait()
            return await real()

        return call

    for name in ("queue_counts", "tenant_list"):
        monkeypatch.setattr(storage, name, gated(name))
    runtime.limits.invalidate()
    admissions = [asyncio.create_task(runtime.limits.admission(owner.id)) for _ in range(20)]
    await _until_stuck(admissions)
    release.set()
    decided = await asyncio.gather(*admissions)
    assert calls == {"tenant_list": 1, "queue_counts": 1}
    assert {admission.limits.max_queued for admission in decided} == {3}


async def test_a_failed_refresh_is_retried_by_the_next_caller(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = (await runtime.tenants.create("toml")).tenant
    real = runtime.storage.queue_counts
    failures = [errors.StorageError("down")]

    async def flaky() -> Any:
        if failures:
            raise failures.pop()
        return await real()

    monkeypatch.setattr(runtime.storage, "queue_counts", flaky)
    runtime.limits.invalidate()
    with pytest.raises(errors.StorageError):
        await runtime.limits.admission(owner.id)
    assert (await runtime.limits.admission(owner.id)).full is None


async def test_every_tenants_admissions_bring_the_total_bound_near(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Far from a bound a submit skips the exact count; what this process admitted since the
    last count, for any tenant, counts towards everyone's bound (max_queued_total 50 here)."""
    monkeypatch.setattr(limits_module, "_EXACT_ROOM", 10)
    first = (await runtime.tenants.create("a")).tenant
    second = (await runtime.tenants.create("b")).tenant
    assert (await runtime.limits.admission(second.id)).bounds is None
    runtime.limits.admitted(first.id, 39)
    assert (await runtime.limits.admission(second.id)).bounds is None  # 11 left: far
    runtime.limits.admitted(first.id, 1)
    near = (await runtime.limits.admission(second.id)).bounds
    assert near is not None and (near.total_max, near.tenant_max) == (50, None)


def _queue_limits_passed(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, *inserts: str
) -> list[Any]:
    """The `queue_limit` of each call of the storage's `inserts` methods from now on (None
    for a call that takes none)."""
    passed: list[Any] = []
    for insert in inserts:
        real = getattr(runtime.storage, insert)

        async def spy(real: Any = real, **kwargs: Any) -> Any:
            passed.append(kwargs.get("queue_limit"))
            return await real(**kwargs)

        monkeypatch.setattr(runtime.storage, insert, spy)
    return passed


async def test_a_batch_far_from_the_bounds_skips_the_exact_count_and_near_one_counts(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is judged as a single submit is, counting all of its jobs: far from every
    bound (the counts plus what this process admitted, plus the batch) its insert skips the
    exact count; a batch that could reach a bound is counted exactly and refused whole when
    it would cross it (max_queued_total 50 here, the exact room 10)."""
    monkeypatch.setattr(limits_module, "_EXACT_ROOM", 10)
    owner = (await runtime.tenants.create("a")).tenant
    bounds = _queue_limits_passed(runtime, monkeypatch, "job_insert")
    await runtime.jobs.submit_many(tenant_id=owner.id, specs=[chat()] * 5)
    await runtime.jobs.submit_many(tenant_id=owner.id, specs=[chat()] * 35)  # 40 at most: far
    assert bounds == [None, None]
    await runtime.jobs.submit_many(tenant_id=owner.id, specs=[chat()])  # 41: within the room
    assert bounds[-1] is not None and bounds[-1].total_max == 50
    with pytest.raises(errors.QueueFull):
        await runtime.jobs.submit_many(tenant_id=owner.id, specs=[chat()] * 10)  # 51
    assert await queued(runtime.storage, owner.id) == 41


async def test_a_bulk_call_far_from_the_bounds_skips_the_exact_count_and_is_tallied(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits_module, "_EXACT_ROOM", 10)
    owner = (await runtime.tenants.create("a")).tenant
    bounds = _queue_limits_passed(runtime, monkeypatch, "job_insert")
    items = [submit_many.SubmitManyItem(chat(str(n))) for n in range(40)]
    await submit_many.submit_bulk(runtime.jobs, tenant_id=owner.id, items=items)
    assert bounds == [None]
    # The 40 stored count towards the bounds before the next count: the next call is near.
    await submit_many.submit_bulk(runtime.jobs, tenant_id=owner.id, items=items[:1])
    assert bounds[-1] is not None and bounds[-1].total_max == 50


def test_a_count_serves_longer_the_farther_every_bound_is() -> None:
    recount_after = limits_module.recount_after
    assert recount_after([]) == 1.0
    assert recount_after([-3]) == recount_after([0]) == recount_after([10_000]) == 1.0
    assert recount_after([20_000]) == 2.0
    assert recount_after([100_000, 20_000]) == 2.0  # the nearest bound decides
    assert recount_after([100_000]) == 10.0
    assert recount_after([900_000_000]) == 30.0  # at most


class _Counted:
    """The storage reads admission makes: tenants, overrides, and queue counts as set."""

    def __init__(self, queued: dict[str, int], b_cap: int = 20_000) -> None:
        self.queued = queued
        self.b_cap = b_cap
        self.counts = 0

    async def tenant_list(self) -> list[Tenant]:
        at = datetime(2030, 1, 1, tzinfo=UTC)
        return [Tenant(t, t, "whsec", at) for t in ("a", "b")]

    async def tenant_limits_all(self) -> dict[str, LimitOverrides]:
        return {"b": LimitOverrides(max_queued=self.b_cap)}

    async def queue_counts(self) -> QueueCounts:
        self.counts += 1
        return QueueCounts(dict(self.queued), {})


async def test_the_queue_is_recounted_rarely_far_from_every_bound_and_each_second_near_one() -> (
    None
):
    """Far from every bound (defaults: 100,000 a tenant, 1,000,000 in all) a count serves for
    room / 10,000 s; a tenant nearing its bound brings the recount back to every second."""
    clock = FakeClock()
    storage = _Counted({})
    service = limits_module.LimitsService(
        storage=cast(Storage, storage),
        settings=Settings(database_url="sqlite:///x.db"),
        clock=clock,
    )
    await service.admission("a")
    assert storage.counts == 1
    # b (capped at 20,000, none queued) is the nearest: 20,000 of room serve 2 s.
    clock.advance(1.5)
    await service.admission("a")
    assert storage.counts == 1
    clock.advance(0.6)
    storage.queued = {"a": 10, "b": 15_000}  # b is within 10,000 of its bound now
    await service.admission("a")
    assert storage.counts == 2
    clock.advance(1.1)
    await service.admission("a")
    assert storage.counts == 3
    storage.queued = {"a": 10}
    clock.advance(1.1)
    await service.admission("a")  # counted: b is far again
    assert storage.counts == 4
    clock.advance(1.9)
    await service.admission("a")
    assert storage.counts == 4


async def test_admitting_into_a_tenant_the_count_did_not_foresee_brings_the_recount_nearer() -> (
    None
):
    clock = FakeClock()
    storage = _Counted({}, b_cap=60_000)
    settings = Settings(
        database_url="sqlite:///x.db", tenant_defaults=TenantLimits(max_queued=900_000)
    )
    service = limits_module.LimitsService(
        storage=cast(Storage, storage), settings=settings, clock=clock
    )
    await service.admission("a")  # rooms: 900,000 under a's cap, 60,000 under b's: 6 s
    clock.advance(1.5)
    service.admitted("b", 55_000)  # this process stored 55,000 of b's jobs since
    await service.admission("b")  # 5,000 left under b's cap: near
    assert storage.counts == 1
    clock.advance(1.1)
    await service.admission("a")
    assert storage.counts == 2
