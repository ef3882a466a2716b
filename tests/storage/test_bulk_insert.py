"""job_insert with per-item keys (native bulk), on SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from jobgate import errors
from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import BulkItem, IdempotencyClaim, QueueLimit, SubmitOutcome
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_bulk, make_tenant, new_job, queued, submit_one

pytestmark = pytest.mark.asyncio


def claim(key: str, body_hash: str = "h") -> IdempotencyClaim:
    return IdempotencyClaim(route="r", key=key, body_hash=body_hash, status_code=202, ttl_s=3600)


async def test_keyed_and_keyless_items_in_order_with_replays(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    items = [
        BulkItem(new_job(tenant, metadata={"n": 0}), claim("a")),
        BulkItem(new_job(tenant, metadata={"n": 1})),
        BulkItem(new_job(tenant, metadata={"n": 2}), claim("a")),  # same key, same body
        BulkItem(new_job(tenant, metadata={"n": 3}), claim("a", "other")),  # another body
        BulkItem(new_job(tenant, metadata={"n": 4}), claim("b")),
    ]
    results = await insert_bulk(storage, items=items, now=clock.now())
    assert isinstance(results[0], SubmitOutcome) and not results[0].replayed
    assert isinstance(results[1], SubmitOutcome) and results[1].job.metadata == {"n": 1}
    assert isinstance(results[2], SubmitOutcome) and results[2].replayed
    assert results[2].job.id == results[0].job.id
    assert isinstance(results[3], errors.IdempotencyKeyReused)
    assert isinstance(results[4], SubmitOutcome) and results[4].job.metadata == {"n": 4}
    assert await queued(storage, tenant.id) == 3
    # The whole call again: every keyed item replays, nothing is doubled.
    again = await insert_bulk(storage, items=[items[0], items[4]], now=clock.now())
    assert all(isinstance(r, SubmitOutcome) and r.replayed for r in again)
    assert await queued(storage, tenant.id) == 3
    (event,) = await storage.job_events(job_id=results[4].job.id)
    assert event.to_state is JobState.QUEUED


async def test_a_bound_passed_stores_nothing(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    items = [BulkItem(new_job(tenant), claim(f"k{i}")) for i in range(3)]
    with pytest.raises(errors.QueueFull):
        await insert_bulk(
            storage, items=items, queue_limit=QueueLimit(tenant_max=3), now=clock.now()
        )
    assert await queued(storage, tenant.id) == 1
    # The keys were not bound either: the same call under a looser bound stores all three.
    results = await insert_bulk(
        storage, items=items, queue_limit=QueueLimit(tenant_max=4), now=clock.now()
    )
    assert all(isinstance(r, SubmitOutcome) and not r.replayed for r in results)


async def test_a_keyed_item_keeps_its_run_at(storage: Storage, clock: FakeClock) -> None:
    """A keyed item's times travel as job_insert's do (PostgreSQL once passed run_at as text)."""
    tenant = await make_tenant(storage)
    later = clock.now() + timedelta(hours=1)
    items = [BulkItem(new_job(tenant, run_at=later), claim("t")), BulkItem(new_job(tenant))]
    keyed, keyless = await insert_bulk(storage, items=items, now=clock.now())
    assert isinstance(keyed, SubmitOutcome) and keyed.job.run_at == later
    assert isinstance(keyless, SubmitOutcome) and keyless.job.run_at == clock.now()


async def test_an_empty_call_stores_nothing(storage: Storage) -> None:
    assert await insert_bulk(storage, items=[]) == []


async def test_many_keyed_items_each_answer_their_own_binding(
    storage: Storage, clock: FakeClock
) -> None:
    """Replays are resolved for the whole call at once: each item still gets its own key's
    job, or the refusal of its own key, whatever mix of new, replayed and reused keys."""
    tenant = await make_tenant(storage)
    first = await insert_bulk(
        storage,
        items=[BulkItem(new_job(tenant), claim(f"k{i}", f"h{i}")) for i in range(0, 40, 2)],
        now=clock.now(),
    )
    bound = {f"k{2 * n}": r.job.id for n, r in enumerate(first) if isinstance(r, SubmitOutcome)}
    items = []
    for i in range(40):
        body_hash = f"h{i}" if i % 4 != 2 else "another"  # every other bound key: reused
        items.append(BulkItem(new_job(tenant, metadata={"n": i}), claim(f"k{i}", body_hash)))
    items.append(BulkItem(new_job(tenant), claim("k1", "h1")))  # repeats item 1 of this call
    results = await insert_bulk(storage, items=items, now=clock.now())
    for i, result in enumerate(results[:40]):
        if i % 2 == 1:  # a new key: a new job
            assert isinstance(result, SubmitOutcome) and not result.replayed
            assert result.job.metadata == {"n": i}
        elif i % 4 == 0:  # bound earlier with the same body: that job
            assert isinstance(result, SubmitOutcome) and result.replayed
            assert result.job.id == bound[f"k{i}"]
        else:
            assert isinstance(result, errors.IdempotencyKeyReused)
    repeat = results[40]
    assert isinstance(repeat, SubmitOutcome) and repeat.replayed
    assert isinstance(results[1], SubmitOutcome) and repeat.job.id == results[1].job.id
    assert await queued(storage, tenant.id) == 20 + 20


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_keyed_items_cost_the_same_round_trips_at_any_count(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the keyed items of a call are pipelined (binding and insert, then the
    replays' bindings, then their jobs), not one round trip per item."""
    import asyncpg

    tenant = await make_tenant(storage)
    calls: list[str] = []
    # Only this test's event loop counts: the template's clone-ahead thread (CREATE DATABASE)
    # and other loops use asyncpg too, through the same patched class.
    test_loop = asyncio.get_running_loop()
    for name in ("fetch", "fetchmany", "fetchrow", "fetchval", "execute", "executemany"):
        method = getattr(asyncpg.connection.Connection, name)

        def counted(*args: Any, _method: Any = method, _name: str = name, **kwargs: Any) -> Any:
            if _running_loop() is test_loop:
                calls.append(_name)
            return _method(*args, **kwargs)

        monkeypatch.setattr(asyncpg.connection.Connection, name, counted)

    async def round_trips(count: int, prefix: str) -> int:
        items = [BulkItem(new_job(tenant), claim(f"{prefix}{i}")) for i in range(count)]
        await insert_bulk(storage, items=items, now=clock.now())
        calls.clear()
        # Again, with one more new key: every other item replays.
        items.append(BulkItem(new_job(tenant), claim(f"{prefix}-new")))
        results = await insert_bulk(storage, items=items, now=clock.now())
        assert sum(isinstance(r, SubmitOutcome) and r.replayed for r in results) == count
        return len(calls)

    assert await round_trips(3, "a") == await round_trips(60, "b")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
