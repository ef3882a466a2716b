"""The LimitsStore part of the contract, on both backends."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from jobgate import errors
from jobgate.domain import costs
from jobgate.domain.costs import UsageTotal
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.storage.records import IdempotencyClaim, LimitOverrides, QueueLimit, Settlement, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, queued, submit_one

pytestmark = pytest.mark.asyncio


async def test_overrides_round_trip(storage: Storage) -> None:
    tenant = await make_tenant(storage)
    wanted = LimitOverrides(
        max_running=3,
        weight=2.5,
        allowed_models=("a", "b"),
        daily_token_budget=10_000,
        daily_cost_budget_usd=12.5,
    )
    assert await storage.tenant_limits_set(tenant_id=tenant.id, overrides=wanted) == wanted
    assert await storage.tenant_limits_all() == {tenant.id: wanted}
    cleared = LimitOverrides(max_queued=7)
    await storage.tenant_limits_set(tenant_id=tenant.id, overrides=cleared)
    assert await storage.tenant_limits_all() == {tenant.id: cleared}


async def test_queue_counts_and_claims(storage: Storage, clock: FakeClock) -> None:
    a = await make_tenant(storage, "a")
    b = await make_tenant(storage, "b")
    for owner, count in ((a, 3), (b, 2)):
        for _ in range(count):
            await submit_one(storage, job=new_job(owner), now=clock.now())
    await storage.job_claim(worker_id="w", limit=2, lease_ttl_s=60, now=clock.now())
    counts = await storage.queue_counts()
    assert counts.queued_total == 3
    assert sum(counts.claimed_by_tenant.values()) == 2
    assert await queued(storage, a.id) + await queued(storage, b.id) == 3


async def test_queue_limit_refuses_at_the_bound_but_answers_replays(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    key = IdempotencyClaim(
        route="POST /v1/jobs", key="k", body_hash="h", status_code=202, ttl_s=86_400
    )
    first = await submit_one(storage, job=new_job(tenant), idempotency=key, now=clock.now())
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    with pytest.raises(errors.QueueFull) as caught:
        await submit_one(
            storage, job=new_job(tenant), queue_limit=QueueLimit(tenant_max=2), now=clock.now()
        )
    assert caught.value.limit == "max_queued"
    replay = await submit_one(
        storage,
        job=new_job(tenant),
        idempotency=key,
        queue_limit=QueueLimit(tenant_max=2),
        now=clock.now(),
    )
    assert replay.replayed and replay.job.id == first.job.id
    with pytest.raises(errors.QueueFull) as caught:
        await submit_one(
            storage, job=new_job(tenant), queue_limit=QueueLimit(total_max=2), now=clock.now()
        )
    assert caught.value.limit == "max_queued_total"
    assert await queued(storage, tenant.id) == 2
    ok = await submit_one(
        storage, job=new_job(tenant), queue_limit=QueueLimit(tenant_max=3), now=clock.now()
    )
    assert not ok.replayed


async def test_usage_tokens_since(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    [job] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job.id, job.lease_token or ""),
            state=JobState.SUCCEEDED,
            reason="completed",
            usage={"input_tokens": 30, "output_tokens": 12},
        ),
        now=clock.now(),
    )
    today = clock.now().date()
    assert await storage.usage_tokens_since(day=today) == {tenant.id: 42}
    assert await storage.usage_tokens_since(day=today + timedelta(days=1)) == {}


async def billed(
    storage: Storage, clock: FakeClock, tenant: Tenant, usage: tuple[int, int], **job: object
) -> None:
    """A job of `tenant` that succeeds with (input, output) tokens of usage."""
    await submit_one(storage, job=new_job(tenant, **job), now=clock.now())
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(claimed.id, claimed.lease_token or ""),
            state=JobState.SUCCEEDED,
            reason="completed",
            usage={"input_tokens": usage[0], "output_tokens": usage[1]},
        ),
        now=clock.now(),
    )


async def refunded(
    storage: Storage,
    clock: FakeClock,
    tenant: Tenant,
    usage: tuple[int, int],
    *,
    provider: str = "sim",
    model: str | None = "sim-echo",
    cached: dict[str, int] | None = None,
) -> None:
    """A background job cancelled locally whose provider finished anyway: its usage is billed
    as a completion and a matching refund."""
    await submit_one(storage, job=new_job(tenant, provider=provider, model=model), now=clock.now())
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    lease = Lease(claimed.id, claimed.lease_token or "")
    await storage.job_provider_submitting(lease=lease, now=clock.now())
    pid = f"resp_{claimed.id}"
    await storage.job_background_accept(
        lease=lease, provider_job_id=pid, provider_status="queued", reconcile_in_s=30,
        now=clock.now(),
    )  # fmt: skip
    await storage.job_settle(
        settlement=Settlement(
            job_id=claimed.id, provider_job_id=pid, state=JobState.CANCELLED,
            reason="cancel_requested", actor="reconciler", cancel_outcome="not_supported",
            watch_in_s=10,
        ),
        now=clock.now(),
    )  # fmt: skip
    assert await storage.job_discard_late_result(
        job_id=claimed.id, provider_job_id=pid, to_state=JobState.SUCCEEDED,
        usage=cached or {"input_tokens": usage[0], "output_tokens": usage[1]},
        actor="reconciler",
        now=clock.now(),
    )  # fmt: skip


async def test_usage_by_model_since(storage: Storage, clock: FakeClock) -> None:
    a = await make_tenant(storage, "a")
    b = await make_tenant(storage, "b")
    await billed(storage, clock, a, (1000, 1000), provider="openai", model="old")  # yesterday
    clock.advance(86_400)
    today = clock.now().date()
    await billed(storage, clock, a, (100, 10), provider="openai", model="mini")
    await billed(storage, clock, a, (200, 20), provider="openai", model="mini")
    await billed(storage, clock, a, (7, 3), provider="openai", model="big")
    await billed(storage, clock, a, (5, 5), provider="sim", model=None)
    await billed(storage, clock, b, (1, 2), provider="openai", model="mini")
    await refunded(storage, clock, a, (50, 50), provider="openai", model="refunded")
    await refunded(storage, clock, b, (40, 4), provider="openai", model="mini")

    totals = await storage.usage_by_model_since(day=today)
    assert sorted(totals, key=lambda u: (u.tenant_id, u.provider, u.model or "")) == [
        UsageTotal(a.id, "openai", "big", 7, 3),
        UsageTotal(a.id, "openai", "mini", 300, 30),
        UsageTotal(a.id, "openai", "refunded", 0, 0),
        UsageTotal(a.id, "sim", None, 5, 5),
        UsageTotal(b.id, "openai", "mini", 1, 2),
    ]
    # The same ledger as the token view sees it.
    assert await storage.usage_tokens_since(day=today) == {a.id: 350, b.id: 3}
    assert await storage.usage_by_model_since(day=today + timedelta(days=1)) == []


async def test_retention_purges_old_results_and_keeps_tombstones(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    old = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    await storage.job_cancel(job_id=old.id, tenant_id=tenant.id, actor="api", now=clock.now())
    live = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    clock.advance(100)
    recent = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    await storage.job_cancel(job_id=recent.id, tenant_id=tenant.id, actor="api", now=clock.now())
    purged = await storage.job_purge_expired(
        completed_before=clock.now() - timedelta(seconds=50), limit=10, now=clock.now()
    )
    assert purged == 1
    tombstone = await storage.job_get(job_id=old.id)
    assert tombstone is not None and tombstone.request is None and tombstone.purged_at
    assert len(await storage.job_events(job_id=old.id)) == 2  # the history stays
    for keep in (live.id, recent.id):
        kept = await storage.job_get(job_id=keep)
        assert kept is not None and kept.request is not None
    assert (
        await storage.job_purge_expired(
            completed_before=clock.now() - timedelta(seconds=50), limit=10, now=clock.now()
        )
        == 0
    )


async def test_expired_idempotency_keys_are_forgotten(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for key, ttl in (("short", 10), ("long", 1000)):
        await submit_one(
            storage,
            job=new_job(tenant),
            idempotency=IdempotencyClaim(
                route="POST /v1/jobs", key=key, body_hash="h", status_code=202, ttl_s=ttl
            ),
            now=clock.now(),
        )
    clock.advance(11)
    assert await storage.idempotency_purge_expired(limit=10, now=clock.now()) == 1
    assert await storage.idempotency_purge_expired(limit=10, now=clock.now()) == 0


# -- prompt-cache tokens in the ledger ----------------------------------------------

# Anthropic's usage with prompt caching, as anthropic_usage() counts it: input_tokens counts
# every input token, the cache reads and writes among them.
CACHED_USAGE = {
    "input_tokens": 3210,
    "output_tokens": 100,
    "cache_read_input_tokens": 3000,
    "cache_creation_input_tokens": 200,
}
# Claude Sonnet: $3 input, $15 output, cache reads 0.1x, 5-minute cache writes 1.25x.
CLAUDE = costs.Price(
    Decimal(3),
    Decimal(15),
    cache_read_per_mtok=Decimal("0.30"),
    cache_write_per_mtok=Decimal("3.75"),
)
PRICES = {"claude": {"*": CLAUDE}}
# What the provider bills for one such call.
BILLED = (10 * 3 + 3000 * Decimal("0.30") + 200 * Decimal("3.75") + 100 * 15) / 1_000_000


async def test_cache_tokens_are_billed_at_the_cache_prices(
    storage: Storage, clock: FakeClock
) -> None:
    """A job finished under a lease and one settled by the reconciler, both with cache reads
    and writes: the tenant's spend today is what the provider bills, not the input price."""
    tenant = await make_tenant(storage)
    since = clock.now()
    await submit_one(storage, job=new_job(tenant, provider="claude", model="c"), now=clock.now())
    [leased] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(leased.id, leased.lease_token or ""),
            state=JobState.SUCCEEDED,
            reason="completed",
            usage=CACHED_USAGE,
        ),
        now=clock.now(),
    )
    await submit_one(storage, job=new_job(tenant, provider="claude", model="c"), now=clock.now())
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    lease = Lease(claimed.id, claimed.lease_token or "")
    await storage.job_provider_submitting(lease=lease, now=clock.now())
    await storage.job_background_accept(
        lease=lease, provider_job_id="msgbatch_1", provider_status="in_progress",
        reconcile_in_s=30, now=clock.now(),
    )  # fmt: skip
    await storage.job_settle(
        settlement=Settlement(
            job_id=claimed.id, provider_job_id="msgbatch_1", state=JobState.SUCCEEDED,
            reason="completed", actor="reconciler", result={}, usage=CACHED_USAGE,
        ),
        now=clock.now(),
    )  # fmt: skip

    [total] = await storage.usage_by_model_since(day=since.date())
    assert (total.input_tokens, total.cache_read_tokens, total.cache_write_tokens) == (
        6420,
        6000,
        400,
    )
    spent = costs.spend(await storage.usage_by_model_since(day=since.date()), PRICES)
    assert spent.by_tenant == {tenant.id: 2 * BILLED}
    [entry] = await storage.usage_for_job(job_id=leased.id)
    assert (entry.cache_read_tokens, entry.cache_write_tokens) == (3000, 200)


async def test_refunded_cache_tokens_cancel_out(storage: Storage, clock: FakeClock) -> None:
    """A late result discarded after a cancel: its cache tokens are billed and refunded."""
    tenant = await make_tenant(storage)
    since = clock.now()
    await refunded(
        storage, clock, tenant, (0, 0), provider="claude", model="c", cached=CACHED_USAGE
    )
    [total] = await storage.usage_by_model_since(day=since.date())
    assert (total.cache_read_tokens, total.cache_write_tokens) == (0, 0)
    assert costs.spend([total], PRICES).by_tenant == {tenant.id: Decimal(0)}


async def test_the_request_id_of_the_successful_attempt_is_kept(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    [job] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    assert job.provider_request_id is None
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job.id, job.lease_token or ""),
            state=JobState.SUCCEEDED,
            reason="completed",
            usage={"input_tokens": 1, "output_tokens": 1},
            provider_request_id="req_abc",
        ),
        now=clock.now(),
    )
    stored = await storage.job_get(job_id=job.id)
    assert stored is not None and stored.provider_request_id == "req_abc"
