"""LimitsService.claim_policy, asked by every claim and by every status read of a queued job
(services.waiting), builds the policy only when its inputs move: the limits read again (their
refresh, an invalidation, a reload) or, for a tenant with a daily budget, the budgets summed
again. In between it answers the same policy."""

from __future__ import annotations

from jobgate.process.runtime import Runtime
from jobgate.storage.records import LimitOverrides, TenantShare
from jobgate.testing import FakeClock


async def test_the_policy_is_kept_until_its_limits_are_read_again(
    runtime: Runtime, clock: FakeClock
) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    limits = runtime.limits
    first = await limits.claim_policy()
    assert await limits.claim_policy() is first
    await runtime.storage.tenant_limits_set(
        tenant_id=acme.id, overrides=LimitOverrides(max_running=2)
    )
    assert await limits.claim_policy() is first  # within the refresh, as before
    clock.advance(2.0)  # the limits' refresh
    refreshed = await limits.claim_policy()
    assert refreshed is not first and refreshed.share(acme.id) == TenantShare(max_running=2)
    assert await limits.claim_policy() is refreshed
    limits.invalidate()
    assert await limits.claim_policy() is not refreshed


async def test_a_budget_is_summed_again_on_its_own_refresh(
    runtime: Runtime, clock: FakeClock
) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    await runtime.storage.tenant_limits_set(
        tenant_id=acme.id, overrides=LimitOverrides(daily_token_budget=1_000_000)
    )
    limits = runtime.limits
    limits.invalidate()
    first = await limits.claim_policy()
    assert await limits.claim_policy() is first
    clock.advance(2.0)  # budgets due again (and the limits): a fresh policy
    assert await limits.claim_policy() is not first
