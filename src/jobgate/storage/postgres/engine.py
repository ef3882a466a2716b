"""PostgreSQL's engine (storage.engine): the pool's life, migrations under an advisory lock,
LISTEN/NOTIFY wake-ups on a session of their own, the server's clock and WAL position."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

import asyncpg

from jobgate.storage import migrations
from jobgate.storage.engine import stop_watching
from jobgate.storage.postgres.executor import Conn, PostgresExecutor, Q
from jobgate.storage.records import WalPosition
from jobgate.wakeups import ChangeHub

log = logging.getLogger(__name__)

CHANNEL = "jobgate"


class PostgresEngine:
    dialect = "postgres"

    def __init__(self, sql: PostgresExecutor, *, dsn: str, listen_dsn: str) -> None:
        """`dsn`: what the pool connects to; `listen_dsn`: the LISTEN connection's URL, a
        session of its own (`dsn` itself unless `dsn` is a transaction-mode pooler, which
        cannot carry a LISTEN)."""
        self.dsn = dsn
        self.listen_dsn = listen_dsn
        self.executor = sql
        self._listening = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up (`watch` keeps reconnecting it)."""
        return self._listening.is_set()

    async def open(self) -> None:
        await self.executor.open()

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        await stop_watching(listener)
        await self.executor.close()

    async def migrate(self) -> list[int]:
        """Under an advisory lock, in one transaction: PostgreSQL runs DDL transactionally."""

        async def apply(conn: Conn) -> list[int]:
            applied = []
            done = await _applied_versions(conn)
            for migration in migrations.pending("jobgate.storage.postgres", done):
                await conn.execute(migration.sql)
                await self.executor.fetch(
                    conn, "migration_record", version=migration.version, name=migration.name
                )
                applied.append(migration.version)
            return applied

        return await self.executor.run(apply, transaction=True)

    async def schema_version(self) -> int:
        """Read under the migrations lock, so a concurrent migrate is waited for."""

        async def read(conn: Conn) -> int:
            return max(await _applied_versions(conn), default=0)

        return await self.executor.run(read, transaction=True)

    async def database_now(self) -> datetime:
        row = await self.executor.read_one("database_now")
        assert row is not None
        moment: datetime = row["now"]
        return moment

    async def wal_position(self) -> WalPosition:
        row = await self.executor.read_one("wal_position")
        assert row is not None
        return WalPosition(in_recovery=bool(row["in_recovery"]), lsn=row["lsn"])

    async def watch(self, changes: ChangeHub) -> None:
        """Keep a LISTEN connection open (reconnecting with backoff) feeding `changes`; returns
        once it listens, or after 5 s (it keeps trying)."""
        if self._listener is None:
            self._listener = asyncio.create_task(
                self._listen_forever(changes), name="jobgate-listen"
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=5)

    async def _listen_forever(self, changes: ChangeHub) -> None:
        def on_notify(_conn: object, _pid: int, _channel: str, payload: object) -> None:
            dispatch(changes, str(payload))

        delay = 0.1
        while True:
            lost = asyncio.Event()
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.listen_dsn, timeout=5)
                conn.add_termination_listener(_setter(lost))
                await conn.add_listener(CHANNEL, on_notify)
                self._listening.set()
                changes.everything_changed()  # whatever happened while we were away
                delay = 0.1
                while not lost.is_set():
                    # A silent network drop does not terminate the connection: probe it.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lost.wait(), timeout=10)
                    if not lost.is_set():
                        await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout=5)
            except asyncio.CancelledError:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(conn.close(), timeout=2)
                raise
            except Exception as exc:  # reconnect on any failure; never let wake-ups die
                log.warning("listen connection lost: %s", type(exc).__name__)
            self._listening.clear()
            if conn is not None:
                conn.terminate()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def dispatch(changes: ChangeHub, payload: str) -> None:
    """One NOTIFY payload (`<kind>:<ids>`, written by the triggers) as wake-ups."""
    kind, _, ids = payload.partition(":")
    if kind == "j":
        changes.jobs_changed(ids.split(","))
    elif kind == "q":
        changes.work_available()
    elif kind == "c":
        changes.cancel_requested(ids.split(","))
    elif kind == "o":
        changes.outbox_available()
    elif kind == "r":
        changes.reconcile_due()
    elif kind == "s":
        changes.streams_changed(ids.split(","))


def _setter(event: asyncio.Event) -> Callable[[object], None]:
    return lambda _conn: event.set()


async def _applied_versions(conn: Conn) -> set[int]:
    """The migrations applied, read under the migrations lock (taken first: two processes
    creating the table at once collide in pg_type), held until the transaction ends."""
    await conn.execute(Q["migrations_lock"].sql)
    await conn.execute(Q["migrations_table"].sql)
    return {row["version"] for row in await conn.fetch(Q["migrations_applied"].sql)}
