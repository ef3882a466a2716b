"""Shared rate limit buckets on both backends: requests spaced by 60 / rpm, token
debt from estimates corrected by usage, and concurrent takers that never pass a limit."""

from __future__ import annotations

import asyncio
import sqlite3

import asyncpg
import pytest

from jobgate.domain.rate_limits import PROVIDER_WIDE, Bucket
from jobgate.storage.postgres.store import is_postgres
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import is_sqlite
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio

RPM60 = Bucket("sim", PROVIDER_WIDE, rpm=60)


async def take_wait(
    storage: Storage, clock: FakeClock, *buckets: Bucket, reserve: int = 0
) -> float:
    """Take one request now: 0.0 when admitted, else the seconds to wait."""
    taken = await storage.rate_limit_take(buckets=buckets, reserve_tokens=reserve, now=clock.now())
    assert taken.admitted == (taken.wait_s == 0.0)
    return taken.wait_s


async def test_requests_are_spaced_by_the_rpm(storage: Storage, clock: FakeClock) -> None:
    assert await take_wait(storage, clock, RPM60) == 0.0
    wait_s = await take_wait(storage, clock, RPM60)
    assert wait_s == pytest.approx(1.0)
    clock.advance(0.5)
    assert await take_wait(storage, clock, RPM60) == pytest.approx(0.5)
    clock.advance(0.5)
    assert await take_wait(storage, clock, RPM60) == 0.0


async def test_a_request_given_back_frees_its_slot(storage: Storage, clock: FakeClock) -> None:
    taken = await storage.rate_limit_take(buckets=[RPM60], now=clock.now())
    assert taken.at is not None
    clock.advance(0.5)  # the claim that found no job
    await storage.rate_limit_give_back(buckets=[RPM60], taken_at=taken.at)
    assert await take_wait(storage, clock, RPM60) == 0.0
    assert await take_wait(storage, clock, RPM60) == pytest.approx(1.0)


async def test_every_bucket_must_admit(storage: Storage, clock: FakeClock) -> None:
    model = Bucket("sim", "sim-echo", rpm=6)
    assert await take_wait(storage, clock, RPM60, model) == 0.0
    clock.advance(1)
    # The provider admits again, the model not for 9 more seconds: nothing is taken.
    assert await take_wait(storage, clock, RPM60, model) == 9.0
    assert await take_wait(storage, clock, RPM60) == 0.0


async def test_token_debt_holds_requests_back(storage: Storage, clock: FakeClock) -> None:
    tpm = Bucket("sim", PROVIDER_WIDE, tpm=600)  # 10 tokens a second
    assert await take_wait(storage, clock, tpm) == 0.0
    await storage.rate_limit_spend(spends=[(tpm, 100)], now=clock.now())  # the estimate
    assert await take_wait(storage, clock, tpm) == 10.0
    await storage.rate_limit_spend(spends=[(tpm, -60)], now=clock.now())  # usage said 40
    assert await take_wait(storage, clock, tpm) == 4.0
    waits = await storage.rate_limit_waits(buckets=[tpm], now=clock.now())
    assert waits == {("sim", PROVIDER_WIDE): 4.0}


async def test_a_take_reserves_tokens_in_the_same_transaction(
    storage: Storage, clock: FakeClock
) -> None:
    """With a tpm only, a take that charged nothing would admit every concurrent taker until
    one of them spent its estimate: the reservation closes the bucket at once."""
    tpm = Bucket("sim", PROVIDER_WIDE, tpm=600)  # 10 tokens a second
    assert await take_wait(storage, clock, tpm, reserve=50) == 0
    assert await take_wait(storage, clock, tpm, reserve=50) == 5.0
    await storage.rate_limit_spend(spends=[(tpm, -30)], now=clock.now())  # the job's estimate
    assert await take_wait(storage, clock, tpm) == 2.0


async def test_queued_jobs_behind_a_closed_bucket_are_counted(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    for _ in range(3):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    await submit_one(storage, job=new_job(tenant, delay_s=60.0), now=clock.now())
    assert await storage.rate_limited_queued(buckets=[RPM60], now=clock.now()) == {}
    await take_wait(storage, clock, RPM60)
    got = await storage.rate_limited_queued(buckets=[RPM60], now=clock.now())
    assert got == {("sim", PROVIDER_WIDE): 3}


async def test_concurrent_takers_share_one_budget(storage: Storage, clock: FakeClock) -> None:
    admitted = 0
    for _ in range(10):  # ten seconds of fake time, eight takers racing each half second
        for _ in range(2):
            waits = await asyncio.gather(
                *(storage.rate_limit_take(buckets=[RPM60], now=clock.now()) for _ in range(8))
            )
            admitted += sum(1 for w in waits if w.admitted)
            clock.advance(0.5)
    assert admitted == 10


async def test_a_give_back_after_a_later_take_admits_no_extra_start(
    storage: Storage, clock: FakeClock
) -> None:
    """rpm 600: one start every 0.1 s. A request taken at 0.1 and given back once another was
    taken at 0.2 cannot make room at 0.2: that start already waited for its slot to pass, and a
    third start would fall within one spacing of the first two."""
    rpm600 = Bucket("sim", PROVIDER_WIDE, rpm=600)
    assert await take_wait(storage, clock, rpm600) == 0.0  # starts at 0.0
    clock.advance(0.1)
    unused = await storage.rate_limit_take(buckets=[rpm600], now=clock.now())
    assert unused.at is not None
    clock.advance(0.1)
    assert await take_wait(storage, clock, rpm600) == 0.0  # starts at 0.2
    await storage.rate_limit_give_back(buckets=[rpm600], taken_at=unused.at)
    assert await take_wait(storage, clock, rpm600) == pytest.approx(0.1)


async def test_a_give_back_returns_only_its_own_buckets_last_slot(
    storage: Storage, clock: FakeClock
) -> None:
    """A take from the provider and one model, given back after another model's take from
    the provider: the model's slot is free again, the provider's stays spent."""
    model = Bucket("sim", "sim-echo", rpm=6)
    unused = await storage.rate_limit_take(buckets=[RPM60, model], now=clock.now())
    assert unused.at is not None
    clock.advance(1)
    assert await take_wait(storage, clock, RPM60, Bucket("sim", "sim-other", rpm=6)) == 0.0
    await storage.rate_limit_give_back(buckets=[RPM60, model], taken_at=unused.at)
    waits = await storage.rate_limit_waits(buckets=[RPM60, model], now=clock.now())
    assert waits == {("sim", PROVIDER_WIDE): pytest.approx(1.0)}


async def raw_sql(storage: Storage, *statements: str) -> None:
    """Run statements through a connection of the test's own, behind the store's back."""
    if is_sqlite(storage):
        conn = sqlite3.connect(storage.engine.path)
        try:
            for statement in statements:
                conn.execute(statement)
            conn.commit()
        finally:
            conn.close()
        return
    assert is_postgres(storage)
    pg = await asyncpg.connect(storage.engine.dsn)
    try:
        for statement in statements:
            await pg.execute(statement)
    finally:
        await pg.close()


async def test_the_upgrade_pays_off_a_debt_an_unbounded_charge_left(storage: Storage) -> None:
    """Before one job's charge was bounded, a cap of 10**15 put a bucket's debt ~1e15 s ahead,
    across restarts; migration 0037 pays such a debt off and leaves an ordinary one alone."""
    stuck = Bucket("sim", PROVIDER_WIDE, tpm=600)
    busy = Bucket("other", PROVIDER_WIDE, tpm=600)
    for bucket in (stuck, busy):  # a minute of debt each
        assert (await storage.rate_limit_take(buckets=[bucket], reserve_tokens=600)).admitted
    await raw_sql(
        storage,
        "UPDATE rate_limit_buckets SET tokens_at = tokens_at + 1e15 WHERE provider = 'sim'",
        "UPDATE rate_limit_buckets SET tokens_at = tokens_at + 3600 WHERE provider = 'other'",
        "DELETE FROM schema_migrations WHERE version = 37",
    )
    assert await storage.migrate() == [37]
    waits = await storage.rate_limit_waits(buckets=[stuck, busy])
    assert waits.get(("sim", PROVIDER_WIDE), 0.0) < 60
    assert 3600 < waits[("other", PROVIDER_WIDE)] <= 3660
