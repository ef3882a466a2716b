"""The keyed items of a bulk insert: every case a key meets (new, bound, reused with another
body, expired and bound again, repeated inside the call, bound by a concurrent call), on both
backends; on PostgreSQL all the keys of a call bind in one statement."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from jobgate import errors
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import BulkItem, IdempotencyClaim, SubmitOutcome
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_bulk, make_tenant, new_job, queued

pytestmark = pytest.mark.asyncio


def claim(key: str, body_hash: str = "h", ttl_s: float = 3600) -> IdempotencyClaim:
    return IdempotencyClaim(route="r", key=key, body_hash=body_hash, status_code=202, ttl_s=ttl_s)


async def test_an_expired_key_binds_again_and_its_repeats_answer_the_new_binding(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    (old,) = await insert_bulk(
        storage, items=[BulkItem(new_job(tenant), claim("k", ttl_s=10))], now=clock.now()
    )
    assert isinstance(old, SubmitOutcome)
    clock.advance(11)
    items = [
        BulkItem(new_job(tenant, metadata={"n": 0}), claim("k", "other", ttl_s=10)),
        BulkItem(new_job(tenant, metadata={"n": 1}), claim("k", "other", ttl_s=10)),
        BulkItem(new_job(tenant, metadata={"n": 2}), claim("k", ttl_s=10)),  # the old body
    ]
    rebound, repeat, old_body = await insert_bulk(storage, items=items, now=clock.now())
    assert isinstance(rebound, SubmitOutcome) and not rebound.replayed
    assert rebound.job.id != old.job.id and rebound.job.metadata == {"n": 0}
    assert isinstance(repeat, SubmitOutcome) and repeat.replayed
    assert repeat.job.id == rebound.job.id
    assert isinstance(old_body, errors.IdempotencyKeyReused)
    assert await queued(storage, tenant.id) == 2


async def test_a_key_repeated_with_another_body_first_is_refused_after_it(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    items = [
        BulkItem(new_job(tenant), claim("x", "one")),
        BulkItem(new_job(tenant), claim("y")),
        BulkItem(new_job(tenant), claim("x", "two")),
        BulkItem(new_job(tenant), claim("x", "one")),
    ]
    first, other, reused, repeat = await insert_bulk(storage, items=items, now=clock.now())
    assert isinstance(first, SubmitOutcome) and not first.replayed
    assert isinstance(other, SubmitOutcome) and not other.replayed
    assert isinstance(reused, errors.IdempotencyKeyReused)
    assert isinstance(repeat, SubmitOutcome) and repeat.replayed
    assert repeat.job.id == first.job.id and repeat.job.id == items[0].job.id
    assert await queued(storage, tenant.id) == 2


async def test_concurrent_calls_with_the_same_keys_make_one_job_per_key(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)

    async def call() -> list[Any]:
        items = [BulkItem(new_job(tenant), claim(f"c{i}")) for i in range(20)]
        return await insert_bulk(storage, items=items, now=clock.now())

    calls = await asyncio.gather(*(call() for _ in range(4)))
    for answers in zip(*calls, strict=True):
        assert all(isinstance(a, SubmitOutcome) for a in answers)
        assert len({a.job.id for a in answers}) == 1
        assert sum(not a.replayed for a in answers) == 1
    assert await queued(storage, tenant.id) == 20


@pytest.mark.postgres
async def test_postgres_a_key_another_transaction_holds_is_in_progress(
    pg_dsn: str, clock: FakeClock
) -> None:
    """A key bound by a transaction still open is waited for, up to lock_timeout: then the
    call is IdempotencyInProgress with nothing stored, and once the holder rolls back the same
    call binds the key."""
    storage = postgres_store(pg_dsn, pool_size=2, lock_timeout_ms=200)
    await storage.open()
    holder = await asyncpg.connect(pg_dsn)
    try:
        tenant = await make_tenant(storage)
        items = [BulkItem(new_job(tenant), claim("free")), BulkItem(new_job(tenant), claim("held"))]
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            "INSERT INTO idempotency_keys (tenant_id, route, key, body_hash, job_id,"
            " status_code, created_at, expires_at)"
            " VALUES ($1, 'r', 'held', 'h', 'job_elsewhere', 202, now(), now() + interval '1h')",
            tenant.id,
        )
        with pytest.raises(errors.IdempotencyInProgress):
            await insert_bulk(storage, items=items, now=clock.now())
        assert await queued(storage, tenant.id) == 0
        await transaction.rollback()
        results = await insert_bulk(storage, items=items, now=clock.now())
        assert all(isinstance(r, SubmitOutcome) and not r.replayed for r in results)
    finally:
        await holder.close()
        await storage.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_postgres_the_keys_of_a_call_bind_in_one_statement(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One statement binds every new key of a call and inserts their jobs (one run of the
    first-events trigger), not one statement per keyed item."""
    tenant = await make_tenant(storage)
    statements: list[tuple[str, int]] = []
    test_loop = asyncio.get_running_loop()  # other threads' loops (the template's) do not count
    for name in ("fetch", "fetchmany"):
        method = getattr(asyncpg.connection.Connection, name)

        def counted(self: Any, query: str, *args: Any, _m: Any = method, _n: str = name) -> Any:
            # fetchmany pipelines one statement per parameter set
            if asyncio.get_running_loop() is test_loop:
                statements.append((_n, len(args[0]) if _n == "fetchmany" else 1))
            return _m(self, query, *args)

        monkeypatch.setattr(asyncpg.connection.Connection, name, counted)
    items = [BulkItem(new_job(tenant), claim(f"k{i}")) for i in range(30)]
    results = await insert_bulk(storage, items=items, now=clock.now())
    assert all(isinstance(r, SubmitOutcome) and not r.replayed for r in results)
    assert statements == [("fetch", 1)]
