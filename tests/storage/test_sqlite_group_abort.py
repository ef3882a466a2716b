"""SQLite group commit when SQLite itself rolls the transaction back (SQLITE_FULL here, via
`PRAGMA max_page_count`; IOERR behaves alike): every caller's answer must match the file. A
caller told "written" finds its row; a caller told "failed" finds none (item 7)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from jobgate import errors
from jobgate.storage.sqlite.database import SqliteDatabase

ROWS_BEFORE = 2
ROWS_AFTER = 3


async def test_an_aborted_group_fails_every_caller_and_writes_nothing(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "full.db"))
    db.open()
    try:
        await db.write(lambda c: c.execute("CREATE TABLE t (name TEXT PRIMARY KEY, pad BLOB)"))
        pages = await db.write(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
        await db.write(lambda c: c.execute(f"PRAGMA max_page_count = {pages + 4}"))

        # Hold the writer so that every operation below lands in one group.
        held, release = threading.Event(), threading.Event()

        def hold(conn: sqlite3.Connection) -> None:
            held.set()
            release.wait(10)

        holder = asyncio.create_task(db.write(hold))
        await asyncio.to_thread(held.wait, 10)

        def insert(name: str, size: int) -> asyncio.Task[object]:
            return asyncio.create_task(
                db.write(lambda c: c.execute("INSERT INTO t VALUES (?, ?)", (name, b"x" * size)))
            )

        before = [insert(f"before{i}", 10) for i in range(ROWS_BEFORE)]
        full = insert("too_big", 200_000)  # SQLITE_FULL: SQLite rolls back the transaction
        after = [insert(f"after{i}", 10) for i in range(ROWS_AFTER)]
        await asyncio.sleep(0.05)  # let every write reach the writer's queue
        release.set()
        # The held operation's group takes in the writes that arrived while it ran (they
        # join before its COMMIT), so the abort may fail it too: it wrote nothing either way.
        await asyncio.gather(holder, return_exceptions=True)
        answers = await asyncio.gather(*before, full, *after, return_exceptions=True)

        stored = await db.read(lambda c: {row[0] for row in c.execute("SELECT name FROM t")})
        names = [f"before{i}" for i in range(ROWS_BEFORE)] + ["too_big"]
        names += [f"after{i}" for i in range(ROWS_AFTER)]
        for name, answer in zip(names, answers, strict=True):
            told_written = not isinstance(answer, BaseException)
            assert told_written == (name in stored), (name, answer, stored)
        assert all(isinstance(a, errors.StorageError) for a in answers)
        assert stored == set()
        # The writer is healthy afterwards.
        await db.write(lambda c: c.execute("INSERT INTO t VALUES ('later', x'00')"))
        assert await db.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 1
    finally:
        await db.close()


async def test_an_operation_that_fails_alone_leaves_the_group_written(tmp_path: Path) -> None:
    """The common case is unchanged: an operation's own error rolls back its savepoint only."""
    db = SqliteDatabase(str(tmp_path / "ok.db"))
    db.open()
    try:
        await db.write(lambda c: c.execute("CREATE TABLE t (name TEXT PRIMARY KEY)"))

        def duplicate(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES ('dup')")
            conn.execute("INSERT INTO t VALUES ('dup')")

        answers = await asyncio.gather(
            db.write(lambda c: c.execute("INSERT INTO t VALUES ('a')")),
            db.write(duplicate),
            db.write(lambda c: c.execute("INSERT INTO t VALUES ('b')")),
            return_exceptions=True,
        )
        assert isinstance(answers[1], errors.StorageError)
        stored = await db.read(lambda c: {row[0] for row in c.execute("SELECT name FROM t")})
        assert stored == {"a", "b"}
    finally:
        await db.close()


async def test_a_write_sent_while_a_group_runs_joins_its_commit(tmp_path: Path) -> None:
    """Group commit takes in late arrivals: a write queued while the group's operations run is
    committed by that group's COMMIT (one fsync), and both callers are answered after it."""
    db = SqliteDatabase(str(tmp_path / "late.db"))
    db.open()
    try:
        await db.write(lambda c: c.execute("CREATE TABLE t (name TEXT PRIMARY KEY, txn INT)"))
        running, go_on = threading.Event(), threading.Event()

        def first(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES ('first', (SELECT count(*) FROM t))")
            running.set()
            go_on.wait(10)

        def late(conn: sqlite3.Connection) -> bool:
            """Whether `first` is still uncommitted: another connection cannot see it yet."""
            conn.execute("INSERT INTO t VALUES ('late', 0)")
            other = sqlite3.connect(tmp_path / "late.db")
            try:
                return bool(other.execute("SELECT count(*) FROM t").fetchone()[0] == 0)
            finally:
                other.close()

        one = asyncio.create_task(db.write(first))
        await asyncio.to_thread(running.wait, 10)
        two = asyncio.create_task(db.write(late))
        await asyncio.sleep(0.05)  # the late write is in the queue while `first` still runs
        assert not one.done() and not two.done()
        go_on.set()
        assert await two is True
        await one
        names = await db.read(lambda c: {r[0] for r in c.execute("SELECT name FROM t")})
        assert names == {"first", "late"}
    finally:
        await db.close()
