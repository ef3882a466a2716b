"""SQLite access for an asyncio program: one writer thread with group commit, reader threads.

SQLite has one writer. Instead of every coroutine fighting for the write lock, write operations
queue for one thread, which runs every operation waiting at that moment inside one
`BEGIN IMMEDIATE` transaction, each in its own SAVEPOINT, and commits once (one fsync for the
group). An operation that raises rolls back to its savepoint alone, unless SQLite rolled
back the whole transaction (SQLITE_FULL, IOERR): then every operation of the group is told it
failed, which is true. No caller is answered before the COMMIT that made its write durable.
Reads run on a small pool of reader threads, each with its own connection; WAL lets them
proceed while the writer writes. A point read (one row by its key: `read_point`) runs inline
on the calling thread's own connection instead: handing it to a reader thread and back costs
more CPU than the read itself (GIL hand-offs included).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from jobgate import errors

T = TypeVar("T")
log = logging.getLogger(__name__)

_MAX_GROUP = 512
_STOP = object()


def translate(exc: sqlite3.Error) -> errors.StorageError:
    """Map a driver error onto jobgate's storage errors."""
    text = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError) and (
        "locked" in text or "busy" in text or "unable to open" in text or "disk i/o" in text
    ):
        return errors.StorageUnavailable(f"sqlite: {exc}")
    return errors.StorageError(f"sqlite: {exc}")


def _create_private(path: str) -> None:
    """Create the database file readable by its owner only (0600, whatever the umask), if it
    does not exist yet. SQLite gives the -wal and -shm files the database file's mode. An
    existing file keeps the mode its operator chose."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)  # the umask may have taken bits away, never added: be exact
    finally:
        os.close(fd)


class SqliteDatabase:
    def __init__(
        self,
        path: str,
        *,
        configure: Callable[[sqlite3.Connection], None] | None = None,
        readers: int = 2,
        busy_timeout_ms: int = 10_000,
    ) -> None:
        self.path = path
        self._configure = configure
        self._busy_timeout_ms = busy_timeout_ms
        self._reader_count = readers
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._readers: concurrent.futures.ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._reader_connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            _create_private(self.path)
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self._busy_timeout_ms / 1000,
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")  # durability is not traded for speed
        conn.execute("PRAGMA foreign_keys = ON")
        if self._configure is not None:
            self._configure(conn)
        return conn

    def open(self) -> None:
        if self._writer is not None:
            return
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            raise translate(exc) from exc
        self._writer = threading.Thread(
            target=self._write_loop, args=(conn,), name="jobgate-sqlite-writer", daemon=True
        )
        self._writer.start()
        self._readers = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._reader_count, thread_name_prefix="jobgate-sqlite-reader"
        )

    async def close(self) -> None:
        if self._writer is None:
            return
        self._queue.put(_STOP)
        await asyncio.to_thread(self._writer.join)
        self._writer = None
        if self._readers is not None:
            self._readers.shutdown(wait=True)
            self._readers = None
        with self._lock:
            for conn in self._reader_connections:
                conn.close()
            self._reader_connections.clear()
        self._local = threading.local()

    # -- writing ---------------------------------------------------------------------------

    async def write(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run `operation` in the writer's transaction; return once it is committed."""
        return await self._enqueue(operation, in_transaction=True)

    async def foreign_commits(self) -> int:
        """A number that changes when another connection (another process) commits.

        Asked of the writer's own connection, whose data_version ignores its own commits:
        unlike a reader's, it moves only for writes made elsewhere."""
        return await self._enqueue(
            lambda conn: int(conn.execute("PRAGMA data_version").fetchone()[0]),
            in_transaction=False,
        )

    async def _enqueue(
        self, operation: Callable[[sqlite3.Connection], T], *, in_transaction: bool
    ) -> T:
        if self._writer is None:
            raise errors.StorageUnavailable("sqlite database is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((operation, future, loop, in_transaction))
        return await asyncio.shield(future)

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            group = [first]
            stopping = self._take_waiting(group)
            stopping = self._run_group(conn, group) or stopping
        conn.close()

    def _take_waiting(self, items: list[Any], room: int = _MAX_GROUP) -> bool:
        """Move the operations waiting in the queue into `items` until it holds `room`.
        Answers whether the stop sentinel was met (what came before it is still taken)."""
        while len(items) < room:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is _STOP:
                return True
            items.append(item)
        return False

    def _run_group(self, conn: sqlite3.Connection, items: list[Any]) -> bool:
        """Run `items` in one transaction; operations that arrive while it runs join it before
        its COMMIT (one fsync for them too: a claim sent while a finish batch executes shares
        that batch's commit). Answers whether the stop sentinel was met among the late ones."""
        outside = [item for item in items if not item[3]]
        group = [item[:3] for item in items if item[3]]
        stopping = False
        if group:
            stopping = self._run_transaction(conn, group, outside)
        for operation, future, loop, _ in outside:
            try:  # outside any transaction: a pragma read
                _deliver(loop, future, operation(conn), None)
            except sqlite3.Error as exc:
                _deliver(loop, future, None, translate(exc))
        return stopping

    def _run_transaction(  # noqa: C901 -- the one writer's group commit and each way it can fail, in one frame
        self, conn: sqlite3.Connection, group: list[Any], outside: list[Any]
    ) -> bool:
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            failure = translate(exc)
            failure.__cause__ = exc
            for _, future, loop in group:
                _deliver(loop, future, None, failure)
            return False
        aborted: errors.StorageError | None = None
        stopping = False
        while aborted is None and len(outcomes) < len(group):
            for operation, _, _ in group[len(outcomes) :]:
                try:
                    conn.execute("SAVEPOINT op")
                    value = operation(conn)
                    conn.execute("RELEASE op")
                    outcomes.append((value, None))
                except BaseException as exc:  # the operation's own error, or a driver error
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK TO op")
                        conn.execute("RELEASE op")
                    if isinstance(exc, sqlite3.Error):
                        failure = translate(exc)
                        failure.__cause__ = exc
                        exc = failure
                    outcomes.append((None, exc))
                    if not conn.in_transaction:
                        # SQLITE_FULL, IOERR, NOMEM…: SQLite rolled back the whole transaction,
                        # every earlier operation of the group included. Running the rest would
                        # commit each on its own (autocommit) while its caller is told it
                        # failed.
                        aborted = _aborted(exc)
                        break
            if aborted is None and not stopping and len(group) + len(outside) < _MAX_GROUP:
                late: list[Any] = []
                stopping = self._take_waiting(late, _MAX_GROUP - len(group) - len(outside))
                outside += [item for item in late if not item[3]]
                group += [item[:3] for item in late if item[3]]
        if aborted is None:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                aborted = translate(exc)
                aborted.__cause__ = exc
        if aborted is not None:
            # Nothing of the group is in the file: every caller whose operation succeeded or
            # never ran is told so (one that failed on its own keeps its own error).
            outcomes += [(None, aborted)] * (len(group) - len(outcomes))
            outcomes = [(None, error or aborted) for _, error in outcomes]
        for (_, future, loop), (value, error) in zip(group, outcomes, strict=True):
            _deliver(loop, future, value, error)
        return stopping

    # -- reading ---------------------------------------------------------------------------

    async def read(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run `operation` on a reader connection (sees everything committed before it starts)."""
        if self._readers is None:
            raise errors.StorageUnavailable("sqlite database is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._readers, self._read_call, operation)

    async def read_point(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run `operation`, a read of at most a few pages (one row by its primary or a unique
        key), inline on this thread's own connection: no thread hand-off. That connection never
        waits for a lock (busy timeout 0): when SQLite answers busy (a recovery, a truncating
        checkpoint, a connection in exclusive mode), the read goes to a reader thread, which
        waits there instead of on the event loop."""
        if self._readers is None:
            raise errors.StorageUnavailable("sqlite database is not open")
        conn: sqlite3.Connection | None = getattr(self._local, "point", None)
        if conn is None:
            # Opened on a reader thread: opening may wait for a lock, which must not block here.
            loop = asyncio.get_running_loop()
            conn = await loop.run_in_executor(self._readers, self._open_point_connection)
            self._local.point = conn
        try:
            return operation(conn)
        except sqlite3.Error as exc:
            if not _busy(exc):
                raise translate(exc) from exc
        return await self.read(operation)

    def _open_point_connection(self) -> sqlite3.Connection:
        try:
            conn = self._connect()
            conn.execute("PRAGMA busy_timeout = 0")
        except sqlite3.Error as exc:
            raise translate(exc) from exc
        with self._lock:
            self._reader_connections.append(conn)
        return conn

    def _read_call(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        try:
            if conn is None:
                conn = self._connect()
                self._local.conn = conn
                with self._lock:
                    self._reader_connections.append(conn)
            return operation(conn)
        except sqlite3.Error as exc:
            raise translate(exc) from exc


def _busy(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused for a lock another connection holds (SQLITE_BUSY or
    SQLITE_LOCKED, any extended code)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _aborted(exc: BaseException) -> errors.StorageError:
    """The error every operation of a group gets when SQLite rolled the group back."""
    failure = errors.StorageUnavailable(
        f"sqlite: the transaction was rolled back ({exc}); nothing of it was written"
    )
    failure.__cause__ = exc
    return failure


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    value: Any,
    error: BaseException | None,
) -> None:
    def settle() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting any more
        loop.call_soon_threadsafe(settle)
