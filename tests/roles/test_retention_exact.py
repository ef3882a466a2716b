"""JOBGATE_RETENTION_S is exact, on both backends and on the fake clock: a finished job without a
live idempotency key or a pending delivery is deleted at the first sweep past its retention
period, whatever its age, even with usage billed today; a keyed job stays while its own key
lives; and today's budgets still count the usage of jobs retention deleted (rolled up)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

import pytest

from jobgate.config import Settings, TenantLimits
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.roles.retention import Retention
from jobgate.services.limits import LimitsService
from jobgate.storage.protocol import Storage
from jobgate.storage.records import IdempotencyClaim, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio

RETENTION_S = 600.0
_keys = itertools.count()
USAGE = {"input_tokens": 10, "output_tokens": 5}


@pytest.fixture
def short(settings: Settings) -> Settings:
    """Ten minutes of retention (the short webhook schedule allows it); keys kept a day."""
    return settings.model_copy(
        update={
            "retention_s": RETENTION_S,
            "webhook_retry_profile": "short",
            "tenants": {"acme": TenantLimits(daily_token_budget=15)},
        }
    )


async def finished(
    storage: Storage,
    tenant: Tenant,
    at: datetime,
    *,
    key_ttl_s: float | None = None,
    usage: dict[str, int] | None = None,
) -> Job:
    """A job submitted at `at` (with an Idempotency-Key living `key_ttl_s`), finished 1 s later."""
    key = None
    if key_ttl_s is not None:
        key = IdempotencyClaim("POST /v1/jobs", f"key-{next(_keys)}", "h", 202, key_ttl_s)
    job = (await submit_one(storage, job=new_job(tenant), idempotency=key, now=at)).job
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=at)
    assert claimed.id == job.id
    return await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job.id, claimed.lease_token or ""),
            state=JobState.SUCCEEDED,
            reason="test",
            result={"ok": True},
            usage=usage,
        ),
        now=at + timedelta(seconds=1),
    )


async def kept(storage: Storage, job: Job) -> bool:
    return await storage.job_get(job_id=job.id) is not None


async def test_a_job_without_a_key_goes_when_its_retention_ends(
    storage: Storage, clock: FakeClock, short: Settings
) -> None:
    job = await finished(storage, await make_tenant(storage), clock.now())
    retention = Retention(storage=storage, settings=short)
    done_at = clock.now() + timedelta(seconds=1)
    await retention.sweep_once(now=done_at + timedelta(seconds=RETENTION_S - 1))
    assert await kept(storage, job)
    deleted = await retention.sweep_once(now=done_at + timedelta(seconds=RETENTION_S + 1))
    assert deleted["jobs"] == 1 and not await kept(storage, job)


async def test_a_keyed_job_stays_while_its_own_key_lives(
    storage: Storage, clock: FakeClock, short: Settings
) -> None:
    """A submit's key lives a day; a batch line's key lives its completion window and more:
    each job stays exactly as long as its own key, then goes at the next sweep."""
    tenant = await make_tenant(storage)
    start = clock.now()
    day_key = await finished(storage, tenant, start, key_ttl_s=86_400)
    two_day_key = await finished(storage, tenant, start, key_ttl_s=2 * 86_400)
    retention = Retention(storage=storage, settings=short)
    await retention.sweep_once(now=start + timedelta(seconds=RETENTION_S + 10))
    assert await kept(storage, day_key) and await kept(storage, two_day_key)
    await retention.sweep_once(now=start + timedelta(seconds=86_400 + 1))
    assert not await kept(storage, day_key) and await kept(storage, two_day_key)
    await retention.sweep_once(now=start + timedelta(seconds=2 * 86_400 + 1))
    assert not await kept(storage, two_day_key)


async def test_usage_billed_today_goes_and_still_counts_toward_todays_budget(
    storage: Storage, clock: FakeClock, short: Settings
) -> None:
    tenant = await make_tenant(storage, "acme")
    start = clock.now()
    job = await finished(storage, tenant, start, usage=USAGE)
    today = (start + timedelta(seconds=1)).date()
    assert await storage.usage_tokens_since(day=today) == {tenant.id: 15}
    limits = LimitsService(storage=storage, settings=short, clock=clock)
    assert tenant.id in (await limits.claim_policy()).blocked_tenants  # 15 of 15 used
    deleted = await Retention(storage=storage, settings=short).sweep_once(
        now=start + timedelta(seconds=RETENTION_S + 2)
    )
    assert deleted["jobs"] == 1 and deleted["usage_ledger"] == 1 and not await kept(storage, job)
    assert await storage.usage_tokens_since(day=today) == {tenant.id: 15}
    [total] = await storage.usage_by_model_since(day=today)
    assert (total.tenant_id, total.provider, total.model) == (tenant.id, "sim", "sim-echo")
    assert (total.input_tokens, total.output_tokens) == (10, 5)
    assert await storage.usage_tokens_since(day=today + timedelta(days=1)) == {}
    limits.invalidate()
    assert tenant.id in (await limits.claim_policy()).blocked_tenants  # still 15 of 15
