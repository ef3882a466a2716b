"""Shared rate limit buckets (issue 19) on both backends: requests spaced by 60 / rpm, token
debt from estimates corrected by usage, and concurrent takers that never pass a limit."""

from __future__ import annotations

import asyncio

import pytest

from jobgate.domain.rate_limits import PROVIDER_WIDE, Bucket
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job

pytestmark = pytest.mark.asyncio

RPM60 = Bucket("sim", PROVIDER_WIDE, rpm=60)


async def test_requests_are_spaced_by_the_rpm(storage: Storage, clock: FakeClock) -> None:
    assert await storage.rate_limit_take(buckets=[RPM60], now=clock.now()) == 0.0
    wait_s = await storage.rate_limit_take(buckets=[RPM60], now=clock.now())
    assert wait_s == pytest.approx(1.0)
    clock.advance(0.5)
    assert await storage.rate_limit_take(buckets=[RPM60], now=clock.now()) == pytest.approx(0.5)
    clock.advance(0.5)
    assert await storage.rate_limit_take(buckets=[RPM60], now=clock.now()) == 0.0


async def test_a_request_given_back_frees_its_slot(storage: Storage, clock: FakeClock) -> None:
    assert await storage.rate_limit_take(buckets=[RPM60], now=clock.now()) == 0.0
    await storage.rate_limit_give_back(buckets=[RPM60])
    assert await storage.rate_limit_take(buckets=[RPM60], now=clock.now()) == 0.0


async def test_every_bucket_must_admit(storage: Storage, clock: FakeClock) -> None:
    model = Bucket("sim", "sim-echo", rpm=6)
    assert await storage.rate_limit_take(buckets=[RPM60, model], now=clock.now()) == 0.0
    clock.advance(1)
    # The provider admits again, the model not for 9 more seconds: nothing is taken.
    assert await storage.rate_limit_take(buckets=[RPM60, model], now=clock.now()) == 9.0
    assert await storage.rate_limit_take(buckets=[RPM60], now=clock.now()) == 0.0


async def test_token_debt_holds_requests_back(storage: Storage, clock: FakeClock) -> None:
    tpm = Bucket("sim", PROVIDER_WIDE, tpm=600)  # 10 tokens a second
    assert await storage.rate_limit_take(buckets=[tpm], now=clock.now()) == 0.0
    await storage.rate_limit_spend(spends=[(tpm, 100)], now=clock.now())  # the estimate
    assert await storage.rate_limit_take(buckets=[tpm], now=clock.now()) == 10.0
    await storage.rate_limit_spend(spends=[(tpm, -60)], now=clock.now())  # usage said 40
    assert await storage.rate_limit_take(buckets=[tpm], now=clock.now()) == 4.0
    waits = await storage.rate_limit_waits(buckets=[tpm], now=clock.now())
    assert waits == {("sim", PROVIDER_WIDE): 4.0}


async def test_a_take_reserves_tokens_in_the_same_transaction(
    storage: Storage, clock: FakeClock
) -> None:
    """With a tpm only, a take that charged nothing would admit every concurrent taker until
    one of them spent its estimate: the reservation closes the bucket at once."""
    tpm = Bucket("sim", PROVIDER_WIDE, tpm=600)  # 10 tokens a second
    assert await storage.rate_limit_take(buckets=[tpm], reserve_tokens=50, now=clock.now()) == 0
    assert await storage.rate_limit_take(buckets=[tpm], reserve_tokens=50, now=clock.now()) == 5.0
    await storage.rate_limit_spend(spends=[(tpm, -30)], now=clock.now())  # the job's estimate
    assert await storage.rate_limit_take(buckets=[tpm], now=clock.now()) == 2.0


async def test_queued_jobs_behind_a_closed_bucket_are_counted(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    for _ in range(3):
        await storage.job_insert(job=new_job(tenant), now=clock.now())
    await storage.job_insert(job=new_job(tenant, delay_s=60.0), now=clock.now())
    assert await storage.rate_limited_queued(buckets=[RPM60], now=clock.now()) == {}
    await storage.rate_limit_take(buckets=[RPM60], now=clock.now())
    got = await storage.rate_limited_queued(buckets=[RPM60], now=clock.now())
    assert got == {("sim", PROVIDER_WIDE): 3}


async def test_concurrent_takers_share_one_budget(storage: Storage, clock: FakeClock) -> None:
    admitted = 0
    for _ in range(10):  # ten seconds of fake time, eight takers racing each half second
        for _ in range(2):
            waits = await asyncio.gather(
                *(storage.rate_limit_take(buckets=[RPM60], now=clock.now()) for _ in range(8))
            )
            admitted += sum(1 for w in waits if w == 0.0)
            clock.advance(0.5)
    assert admitted == 10
