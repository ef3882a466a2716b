"""SQLite point reads (a job by id, an API key's tenant, a queued job's place) run inline on
the calling thread's own connection, not on a reader thread: the hand-off to a thread costs
more than the read itself. That connection never waits for a lock: on
SQLITE_BUSY the read moves to a reader thread, so the event loop is never the one waiting."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobgate import errors
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one


async def test_job_key_and_position_reads_never_use_a_reader_thread(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_store(str(tmp_path / "jobgate.db"), clock=clock)
    await store.open()
    await store.migrate()
    try:
        tenant = await make_tenant(store)
        await store.api_key_create(
            key_id="key_1", tenant_id=tenant.id, key_hash="h" * 64, key_prefix="jg_live_"
        )
        job = new_job(tenant)
        stored = (await submit_one(store, job=job, now=clock.now())).job

        def no_reader_thread(operation: Callable[[sqlite3.Connection], Any]) -> Any:
            raise AssertionError("a point read went to a reader thread")

        monkeypatch.setattr(store.engine.database, "read", no_reader_thread)
        for _ in range(2):  # the connection's first use and a later one
            found = await store.job_get(job_id=job.id, tenant_id=tenant.id)
            assert found is not None and found.id == job.id
            assert (await store.job_get(job_id=job.id)) is not None
            assert await store.job_get(job_id=job.id, tenant_id="ten_other") is None
            assert await store.job_view(job_id=job.id, tenant_id=tenant.id) is not None
            assert await store.job_without_input(job_id=job.id, tenant_id=tenant.id) is not None
            assert await store.job_queue_position(job=stored, now=clock.now()) == 1
            status = await store.job_status(job_id=job.id, tenant_id=tenant.id, now=clock.now())
            assert status is not None and status.queue_position == 1
            owner = await store.api_key_tenant(key_hash="h" * 64)
            assert owner is not None and owner.id == tenant.id
    finally:
        await store.close()


async def test_a_point_read_runs_on_the_calling_thread(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "point.db"))
    db.open()
    try:
        await db.write(lambda c: c.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)"))
        await db.write(lambda c: c.execute("INSERT INTO t VALUES ('a', 'one')"))

        def read(conn: sqlite3.Connection) -> tuple[int, str]:
            row = conn.execute("SELECT v FROM t WHERE k = 'a'").fetchone()
            return threading.get_ident(), row[0]

        assert await db.read_point(read) == (threading.get_ident(), "one")
        await db.write(lambda c: c.execute("UPDATE t SET v = 'two' WHERE k = 'a'"))
        # Sees every write answered before it (autocommit: a new read transaction each time).
        assert await db.read_point(read) == (threading.get_ident(), "two")
    finally:
        await db.close()


async def test_a_busy_point_read_waits_on_a_reader_thread_not_on_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "busy.db"
    db = SqliteDatabase(str(path))
    db.open()
    locker = sqlite3.connect(path, isolation_level=None)
    try:
        await db.write(lambda c: c.execute("CREATE TABLE t (k TEXT PRIMARY KEY)"))
        await db.read_point(lambda c: c.execute("SELECT 1").fetchone())  # its connection is open

        def take_the_write_lock(conn: sqlite3.Connection) -> int:
            # A real SQLITE_BUSY while `locker` holds the write lock; a point read never writes,
            # but SQLite answers a reader busy the same way (recovery, truncating checkpoint).
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return threading.get_ident()

        locker.execute("BEGIN IMMEDIATE")
        attempt = asyncio.create_task(db.read_point(take_the_write_lock))
        # The inline attempt ran and gave up at once: the loop is free (with the readers' 10 s
        # busy timeout inline, this would block here, then fail once the lock stayed held).
        await asyncio.wait_for(asyncio.shield(_until_blocked(attempt)), 5)
        assert not attempt.done()
        locker.execute("ROLLBACK")
        ran_on = await asyncio.wait_for(attempt, 30)
        assert ran_on != threading.get_ident()
    finally:
        locker.close()
        await db.close()


async def _until_blocked(task: asyncio.Task[Any]) -> None:
    """Yield to the loop a few times: the task's inline attempt runs and hands over."""
    for _ in range(3):
        await asyncio.sleep(0)
    assert not task.done()


async def test_other_errors_of_a_point_read_are_storage_errors(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "errors.db"))
    db.open()
    try:
        with pytest.raises(errors.StorageError, match="no such table"):
            await db.read_point(lambda c: c.execute("SELECT * FROM missing").fetchone())
    finally:
        await db.close()


async def test_a_point_read_on_a_closed_database_is_unavailable(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "closed.db"))
    with pytest.raises(errors.StorageUnavailable):
        await db.read_point(lambda c: c.execute("SELECT 1").fetchone())
