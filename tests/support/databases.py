"""Throwaway databases for tests: SQLite files, and PostgreSQL databases cloned from a migrated
template (CREATE DATABASE ... TEMPLATE is much faster than migrating every time).

Every such database is named after the test process that made it (`jobgate_tmpl_<pid>_<hex>`,
`jobgate_t_<pid>_<hex>`). A run that is killed never drops its own, so each new template first
drops those whose process is gone from this machine: a killed run's databases do not pile up on
the shared server. A database whose process is alive, or whose name carries no process id, is
never touched.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import secrets
import threading
import urllib.parse

import asyncpg

from jobgate.storage.postgres.store import postgres_store

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"
_OWNED_NAME = re.compile(r"jobgate_(?:t|tmpl)_(\d+)_[0-9a-f]+")


def admin_dsn() -> str:
    return os.environ.get("JOBGATE_TEST_DATABASE_URL", DEFAULT_ADMIN_DSN)


def owner_pid(database: str) -> int | None:
    """The id of the test process a throwaway database was made by (None: not such a name)."""
    match = _OWNED_NAME.fullmatch(database)
    return None if match is None else int(match.group(1))


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def orphaned(databases: list[str]) -> list[str]:
    """The throwaway databases among `databases` whose test process is gone."""
    return [
        name
        for name in databases
        if (pid := owner_pid(name)) is not None and pid != os.getpid() and not process_alive(pid)
    ]


def dsn_for(database: str, base: str | None = None) -> str:
    parts = urllib.parse.urlsplit(base or admin_dsn())
    return urllib.parse.urlunsplit(parts._replace(path=f"/{database}"))


async def postgres_available() -> bool:
    try:
        conn = await asyncpg.connect(admin_dsn(), timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


class PostgresTemplate:
    """A migrated template database and fresh clones of it.

    With `ahead` > 0 a thread keeps that many clones made in advance and drops the returned ones
    in the background, so that a test waits for neither. Each test still gets a database of its
    own.

    Drops go in concurrent batches, never one at a time: PostgreSQL 15's DROP DATABASE waits for
    a checkpoint, and drops that wait together share one. One by one, under the load of a full
    run, they fell behind the clones and about a thousand were left to the session's end, where
    dropping them took nine minutes; a batch of `DROP_BATCH` costs about what one drop does.
    A batch runs beside the cloning, so a test never waits for a drop either.
    """

    DROP_BATCH = 4  # drops at once: each holds a connection while it waits for the checkpoint

    def __init__(self, *, ahead: int = 0) -> None:
        self.name = f"jobgate_tmpl_{os.getpid()}_{secrets.token_hex(3)}"
        self._clone_prefix = f"jobgate_t_{os.getpid()}_"
        self._clones: list[str] = []
        self._ahead = ahead
        self._ready: queue.Queue[str] = queue.Queue()
        self._dropping: queue.Queue[str] = queue.Queue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    async def create(self) -> None:
        await self.drop_orphans()
        await self._admin(f'CREATE DATABASE "{self.name}"')
        storage = postgres_store(dsn_for(self.name), pool_size=1)
        await storage.open()
        try:
            await storage.migrate()
        finally:
            await storage.close()
        if self._ahead > 0:
            self._thread = threading.Thread(
                target=lambda: asyncio.run(self._keep_ahead()), name="pg-clones", daemon=True
            )
            self._thread.start()

    async def drop_orphans(self) -> list[str]:
        """Drop the throwaway databases of test processes that are gone; their names."""
        conn = await asyncpg.connect(admin_dsn(), timeout=10)
        try:
            rows = await conn.fetch(
                "SELECT datname FROM pg_database WHERE datname LIKE 'jobgate\\_%'"
            )
        finally:
            await conn.close()
        names = orphaned([row["datname"] for row in rows])
        await self._drop_many(names, missing_ok=True)
        return names

    async def clone(self) -> str:
        """A new migrated database; returns its DSN."""
        if self._thread is None:
            name = await self._new_clone()
        else:
            self._wake.set()
            name = await asyncio.to_thread(self._next_ready)
        return dsn_for(name)

    async def drop_clone(self, dsn: str) -> None:
        name = urllib.parse.urlsplit(dsn).path.lstrip("/")
        if self._thread is not None and name in self._clones:
            self._dropping.put(name)
            self._wake.set()
            return
        await self._drop_now(name)

    async def drop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        await self._drop_many([*self._clones, self.name])  # the template shares a checkpoint

    async def _new_clone(self) -> str:
        name = f"{self._clone_prefix}{secrets.token_hex(6)}"
        await self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"')
        self._clones.append(name)
        return name

    async def _drop_now(self, name: str, *, missing_ok: bool = False) -> None:
        try:
            await self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except asyncpg.PostgresError:
            if not missing_ok:  # an orphan another test process is dropping at the same time
                raise
        if name in self._clones:
            self._clones.remove(name)

    async def _drop_many(self, names: list[str], *, missing_ok: bool = False) -> None:
        """Drop `names`, `DROP_BATCH` at a time (each batch shares its checkpoints)."""
        for start in range(0, len(names), self.DROP_BATCH):
            batch = names[start : start + self.DROP_BATCH]
            await asyncio.gather(*(self._drop_now(n, missing_ok=missing_ok) for n in batch))

    def _next_ready(self) -> str:
        while True:
            try:
                return self._ready.get(timeout=0.5)
            except queue.Empty:
                if self._failure is not None:
                    raise RuntimeError("making a PostgreSQL clone failed") from self._failure
                if self._thread is None or not self._thread.is_alive():
                    raise RuntimeError("the PostgreSQL clone thread has stopped") from None

    async def _keep_ahead(self) -> None:
        """The thread's loop: clones first (a test may be waiting); the returned clones dropped
        a batch at a time by a task beside it, so that a slow drop never holds up a clone."""
        dropping: asyncio.Task[None] | None = None
        try:
            while not self._stop.is_set():
                self._wake.clear()  # before looking: a wake-up after this is not lost
                if dropping is not None and dropping.done():
                    dropping.result()  # a failed batch fails the clones too
                    dropping = None
                if dropping is None and not self._dropping.empty():
                    batch = [self._dropping.get() for _ in range(self._dropping.qsize())]
                    dropping = asyncio.create_task(self._drop_many(batch))
                if self._ready.qsize() < self._ahead:
                    self._ready.put(await self._new_clone())
                else:
                    await asyncio.to_thread(self._wake.wait, 1.0 if dropping is None else 0.1)
            if dropping is not None:
                await dropping
        except BaseException as exc:
            self._failure = exc
            raise

    @staticmethod
    async def _admin(statement: str) -> None:
        """Run `statement` on a connection of its own; while the server has no connection to
        spare (a loaded run's processes hold them), wait for one rather than fail the tests."""
        for wait_s in (0.2, 0.5, 1, 2, 4, 8):
            try:
                conn = await asyncpg.connect(admin_dsn(), timeout=10)
                break
            except asyncpg.TooManyConnectionsError:
                await asyncio.sleep(wait_s)
        else:
            conn = await asyncpg.connect(admin_dsn(), timeout=10)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()
