"""PostgreSQL's executor keeps the connection a call gave back cleanly for the next call (no
pass through asyncpg's pool: its acquire and release cost more CPU than a short statement),
while every wait for a connection keeps its bound (`acquire_timeout_s`, then
StorageUnavailable): a caller waiting in the pool is handed the next connection given back,
a failed call's connection goes back to the pool, a kept connection lost or closed is
replaced, one unused for a while or used many times goes back to the pool, and closing the
store closes them all."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from jobgate import errors
from jobgate.storage.postgres import executor
from jobgate.storage.postgres.store import PostgresStore, postgres_store

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]
BOUND_S = 0.3


class Recorded:
    """asyncpg's Pool.acquire and Pool.release, their timeouts recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.acquired: list[float | None] = []
        self.released: list[float | None] = []
        acquire, release = asyncpg.Pool.acquire, asyncpg.Pool.release

        def recording_acquire(pool: asyncpg.Pool, *, timeout: float | None = None) -> Any:
            self.acquired.append(timeout)
            return acquire(pool, timeout=timeout)

        async def recording_release(
            pool: asyncpg.Pool,
            conn: Any,
            *,
            timeout: Any = None,  # noqa: ASYNC109 (asyncpg's interface)
        ) -> Any:
            self.released.append(timeout)
            return await release(pool, conn, timeout=timeout)

        monkeypatch.setattr(asyncpg.Pool, "acquire", recording_acquire)
        monkeypatch.setattr(asyncpg.Pool, "release", recording_release)


async def _pid(storage: PostgresStore) -> int:
    async def pid(conn: Any) -> int:
        value: int = await conn.fetchval("SELECT pg_backend_pid()")
        return value

    return await storage.engine.executor.run(pid)


async def _held(storage: PostgresStore, started: asyncio.Event, done: asyncio.Event) -> int:
    """Hold one connection until `done`; its backend's pid."""

    async def hold(conn: Any) -> int:
        started.set()
        await done.wait()
        value: int = await conn.fetchval("SELECT pg_backend_pid()")
        return value

    return await storage.engine.executor.run(hold)


async def _two_kept(storage: PostgresStore) -> None:
    """Two connections kept: one held while a second call opens and gives back another."""
    started, done = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_held(storage, started, done))
    await asyncio.wait_for(started.wait(), 10)
    assert await storage.engine.executor.read("tenant_list") == []
    done.set()
    await holder
    assert len(storage.engine.executor._kept) == 2


async def _opened(pg_dsn: str, **options: Any) -> PostgresStore:
    storage = postgres_store(pg_dsn, **options)
    await storage.open()
    return storage


async def test_a_connection_given_back_cleanly_serves_the_next_call(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = await _opened(pg_dsn, pool_size=4, acquire_timeout_s=BOUND_S)
    try:
        first = await _pid(storage)
        recorded = Recorded(monkeypatch)
        assert await storage.engine.executor.read("tenant_list") == []
        assert await storage.engine.executor.write_count("api_key_revoke", id="k", now=None) == 0
        assert await _pid(storage) == first
        assert recorded.acquired == [] and recorded.released == []  # no pass through the pool
    finally:
        await storage.close()


async def test_a_failed_calls_connection_goes_back_to_the_pool(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = await _opened(pg_dsn, pool_size=4, acquire_timeout_s=BOUND_S)
    try:
        await _pid(storage)
        recorded = Recorded(monkeypatch)
        with pytest.raises(errors.StorageError):  # a foreign key refuses the row
            await storage.engine.executor.write_one(
                "api_key_insert", id="k", tenant_id="ten_missing", key_hash="h",
                key_prefix="jg_", now=None,
            )  # fmt: skip
        assert recorded.released == [BOUND_S]
        assert storage.engine.executor._kept == []
        assert await storage.engine.executor.read("tenant_list") == []  # from the pool, an idle one
        assert recorded.acquired == [None]  # no timer: asyncpg hands an idle one out at once
    finally:
        await storage.close()


async def test_a_busy_pool_still_bounds_the_wait(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = await _opened(pg_dsn, pool_size=1, acquire_timeout_s=BOUND_S)
    started, done = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_held(storage, started, done))
    try:
        await asyncio.wait_for(started.wait(), 10)
        recorded = Recorded(monkeypatch)
        waits = [storage.engine.executor.read("tenant_list") for _ in range(3)]
        outcomes = await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), 10)
        assert all(isinstance(o, errors.StorageUnavailable) for o in outcomes), outcomes
        assert recorded.acquired == [BOUND_S] * 3
    finally:
        done.set()
        await holder
        await storage.close()


async def test_a_caller_waiting_in_the_pool_gets_the_next_connection_given_back(
    pg_dsn: str,
) -> None:
    storage = await _opened(pg_dsn, pool_size=1, acquire_timeout_s=60)
    started, done = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_held(storage, started, done))
    try:
        await asyncio.wait_for(started.wait(), 10)
        waiter = asyncio.create_task(_pid(storage))
        while storage.engine.executor._waiting == 0:  # noqa: ASYNC110 (the waiter's own task)
            await asyncio.sleep(0)
        done.set()
        held_pid = await holder
        # Not kept by the holder's call (that would leave the waiter to its 60 s bound).
        assert await asyncio.wait_for(waiter, 10) == held_pid
    finally:
        done.set()
        await holder
        await storage.close()


async def test_a_connection_still_to_open_is_waited_for_within_the_bound(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool keeps one connection open (min_size=1): with it busy, the next caller's holder
    has to connect, and a connect that hangs is cut at the bound."""
    storage = await _opened(pg_dsn, pool_size=2, acquire_timeout_s=BOUND_S)
    started, done = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_held(storage, started, done))
    try:
        await asyncio.wait_for(started.wait(), 10)
        hung = asyncio.Event()

        async def hanging_connect(pool: asyncpg.Pool) -> Any:
            await hung.wait()

        monkeypatch.setattr(asyncpg.Pool, "_get_new_connection", hanging_connect)
        recorded = Recorded(monkeypatch)
        with pytest.raises(errors.StorageUnavailable):
            await asyncio.wait_for(storage.engine.executor.read("tenant_list"), 10)
        assert recorded.acquired == [BOUND_S]
    finally:
        done.set()
        await holder
        await storage.close()


async def test_a_kept_connection_lost_is_replaced(pg_dsn: str) -> None:
    storage = await _opened(pg_dsn, pool_size=2, acquire_timeout_s=5)
    try:
        first = await _pid(storage)
        [(kept, _, _)] = storage.engine.executor._kept
        proxied: Any = kept  # asyncpg's proxy: its connection, until asyncpg takes it back
        admin = await asyncpg.connect(pg_dsn)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)
        finally:
            await admin.close()
        async with asyncio.timeout(10):  # until the client has seen the connection end
            while proxied._con is not None and not proxied._con.is_closed():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert await _pid(storage) != first
        assert await storage.engine.executor.read("tenant_list") == []
    finally:
        await storage.close()


async def test_kept_connections_unused_for_a_while_go_back_to_the_pool(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "KEEP_IDLE_S", 0.05)
    storage = await _opened(pg_dsn, pool_size=4, acquire_timeout_s=5)
    try:
        await _two_kept(storage)
        pool = storage.engine.executor._pool
        assert pool is not None and pool.get_idle_size() == 0
        async with asyncio.timeout(10):  # the next look finds both stale
            while storage.engine.executor._kept or pool.get_idle_size() < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert storage.engine.executor._trimming is None  # none kept: no timer
    finally:
        await storage.close()


async def test_a_kept_connection_goes_back_to_the_pool_after_many_uses(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "KEEP_USES", 3)
    storage = await _opened(pg_dsn, pool_size=4, acquire_timeout_s=5)
    try:
        recorded = Recorded(monkeypatch)
        for _ in range(7):
            await storage.engine.executor.read("tenant_list")
        # Taken from the pool, kept for 3 calls, back to the pool at the 4th's end, again.
        assert recorded.acquired == [None, None] and len(recorded.released) == 1
    finally:
        await storage.close()


async def test_closing_the_store_closes_its_kept_connections(pg_dsn: str) -> None:
    storage = await _opened(pg_dsn, pool_size=4, acquire_timeout_s=5)
    await _two_kept(storage)
    await asyncio.wait_for(storage.close(), 4)  # under its own 5 s bound: nothing waited for
    admin = await asyncpg.connect(pg_dsn)
    try:
        async with asyncio.timeout(10):
            while await admin.fetchval(  # noqa: ASYNC110 (the server's backends end)
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'jobgate'"
            ):
                await asyncio.sleep(0.05)
    finally:
        await admin.close()


async def test_many_callers_on_a_small_pool_all_get_their_rows(pg_dsn: str) -> None:
    storage = await _opened(pg_dsn, pool_size=2, acquire_timeout_s=5)
    try:
        for _ in range(3):
            answers = await asyncio.wait_for(
                asyncio.gather(*(storage.engine.executor.read("tenant_list") for _ in range(40))),
                30,
            )
            assert answers == [[]] * 40
        assert len(storage.engine.executor._kept) <= 2
    finally:
        await storage.close()
