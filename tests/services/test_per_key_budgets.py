"""Daily budgets per concurrency key, through the worker on both backends: a key whose tokens
(or spend) today reached its tenant's `daily_token_budget_per_key` (or
`daily_cost_budget_usd_per_key`) is passed over until the next UTC midnight by the database's
clock; other keys, and jobs without a key, go on; retention's rollup keeps counting the usage
of today's deleted jobs."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import pytest

from jobgate.config import ModelPrice, ProviderConfig, Settings
from jobgate.domain.retention import Horizon
from jobgate.domain.states import JobState
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.records import LimitOverrides
from jobgate.testing import FakeClock

CHAT = "/v1/chat/completions"
ECHO_PRICE = ModelPrice(input_per_mtok=Decimal("1000"), output_per_mtok=Decimal("2500.5"))


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        retry_base_s=0.05,
        retry_max_s=0.05,
        shutdown_grace_s=0,
        providers={
            "sim": ProviderConfig(
                kind="sim", model_prefixes=("sim-",), prices={"sim-echo": ECHO_PRICE}
            )
        },
    )


@pytest.fixture(autouse=True)
def database_clock(runtime: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget day is the database's: PostgreSQL's own clock would not follow the fake one."""

    async def database_now() -> datetime:
        return clock.now()

    monkeypatch.setattr(runtime.storage, "database_now", database_now)


def chat(key: str | None) -> SubmitSpec:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    return SubmitSpec(endpoint=CHAT, body=body, concurrency_key=key)


async def spend_one(runtime: Runtime, tenant_id: str, key: str) -> tuple[int, Decimal]:
    """Run one job of `key` (as every job here: the same prompt, the same usage): the tokens
    it billed and what they cost."""
    await runtime.jobs.submit(tenant_id=tenant_id, spec=chat(key))
    [done] = await runtime.worker().run_once()
    assert done is not None and done.state is JobState.SUCCEEDED
    [billed] = await runtime.storage.usage_for_job(job_id=done.id)
    cost = (
        billed.input_tokens * ECHO_PRICE.input_per_mtok
        + billed.output_tokens * ECHO_PRICE.output_per_mtok
    ) / 1_000_000
    return billed.input_tokens + billed.output_tokens, cost


async def keys_claimed(runtime: Runtime, tenant_id: str, *keys: str | None) -> list[str | None]:
    """Submit one job per key, run one claim: the keys of the jobs it started (by str)."""
    for key in keys:
        await runtime.jobs.submit(tenant_id=tenant_id, spec=chat(key))
    runtime.limits.invalidate()
    done = await runtime.worker().run_once()
    return sorted((job.concurrency_key for job in done if job is not None), key=str)


async def set_limits(runtime: Runtime, tenant_id: str, **overrides: object) -> None:
    await runtime.storage.tenant_limits_set(
        tenant_id=tenant_id,
        overrides=LimitOverrides(**overrides),  # type: ignore[arg-type]
    )
    runtime.limits.invalidate()


async def test_a_key_that_used_its_token_budget_exactly_waits_other_keys_go_on(
    runtime: Runtime,
) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    tokens, _ = await spend_one(runtime, acme.id, "alice")
    await set_limits(runtime, acme.id, daily_token_budget_per_key=tokens + 1)
    assert await keys_claimed(runtime, acme.id, "alice") == ["alice"]  # one token left
    await set_limits(runtime, acme.id, daily_token_budget_per_key=tokens * 2)
    # alice used exactly her budget (two jobs): bob and the job without a key go on.
    assert await keys_claimed(runtime, acme.id, "alice", "bob", None) == [None, "bob"]
    policy = await runtime.limits.claim_policy()
    assert policy.blocked_keys == {(acme.id, "alice"): "daily_token_budget_per_key"}
    assert policy.blocked_tenants == frozenset()


async def test_a_key_at_its_cost_budget_waits_until_the_next_utc_day(
    runtime: Runtime, clock: FakeClock
) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    other = (await runtime.tenants.create("other")).tenant
    _, cost = await spend_one(runtime, acme.id, "alice")
    assert cost > 0
    for tenant in (acme, other):  # the same key name in another tenant is another key
        await set_limits(runtime, tenant.id, daily_cost_budget_usd_per_key=float(cost))
    assert await keys_claimed(runtime, acme.id, "alice") == []
    assert await keys_claimed(runtime, other.id, "alice") == ["alice"]
    policy = await runtime.limits.claim_policy()
    assert policy.blocked_keys == {(acme.id, "alice"): "daily_cost_budget_usd_per_key"}
    clock.advance(60)  # a later sum of the budgets, the same day: still held
    runtime.limits.invalidate()
    assert await runtime.worker().run_once() == []
    tomorrow = clock.now().date() + timedelta(days=1)
    clock.set(datetime.combine(tomorrow, time(0), tzinfo=UTC) - timedelta(microseconds=1))
    runtime.limits.invalidate()
    assert await runtime.worker().run_once() == []  # the last moment of the day
    clock.advance(0.000001)  # UTC midnight: a new budget
    runtime.limits.invalidate()
    [started] = await runtime.worker().run_once()
    assert started is not None and started.concurrency_key == "alice"


async def test_a_tenant_without_budgets_per_key_reads_no_usage_per_key(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    await spend_one(runtime, acme.id, "alice")

    async def unexpected(**_: object) -> list[object]:
        raise AssertionError("usage per key read without a budget per key")

    monkeypatch.setattr(runtime.storage, "usage_by_key_since", unexpected)
    await set_limits(runtime, acme.id, daily_token_budget=10**9, rpm_per_key=0)
    assert await keys_claimed(runtime, acme.id, "alice") == ["alice"]


async def test_retention_keeps_counting_a_deleted_jobs_usage_against_its_key(
    runtime: Runtime, clock: FakeClock
) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    tokens, _ = await spend_one(runtime, acme.id, "alice")
    await spend_one(runtime, acme.id, "bob")
    day = clock.now().date()
    before = await runtime.storage.usage_by_key_since(day=day, tenant_ids=[acme.id])
    # Everything finished is past the horizon (PostgreSQL stamps completions by its own clock,
    # which the fake one only starts near).
    horizon = Horizon(completed_before=clock.now() + timedelta(minutes=10), now=clock.now())
    deleted = await runtime.storage.retention_delete(horizon=horizon, limit=100)
    assert deleted.jobs == 2 and deleted.usage_ledger == 2
    after = await runtime.storage.usage_by_key_since(day=day, tenant_ids=[acme.id])
    assert sorted(after, key=str) == sorted(before, key=str)
    assert {(u.concurrency_key, u.tokens) for u in after if u.concurrency_key == "alice"} == {
        ("alice", tokens)
    }
    await set_limits(runtime, acme.id, daily_token_budget_per_key=tokens)
    assert await keys_claimed(runtime, acme.id, "alice", "carol") == ["carol"]
