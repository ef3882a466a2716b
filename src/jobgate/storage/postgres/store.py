"""The scale-out backend: PostgreSQL through asyncpg, SKIP LOCKED claims, LISTEN/NOTIFY wake-ups.

Every role may run in many processes on many machines against one database. Hot paths (submit,
claim, heartbeat, finish, get) are one statement each: asyncpg prepares and caches them per
connection, and the triggers of migration 0001 write the event log, the outbox and the
NOTIFY wake-ups inside the same statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime

import asyncpg

from jobgate.storage import migrations
from jobgate.storage.postgres.executor import Conn, PostgresExecutor, Q
from jobgate.storage.postgres.transactions import PostgresTransactions
from jobgate.storage.records import (
    WalPosition,
)
from jobgate.storage.store.sql_store import SqlStore

log = logging.getLogger(__name__)

CHANNEL = "jobgate"


def _setter(event: asyncio.Event) -> Callable[[object], None]:
    return lambda _conn: event.set()


async def _applied_versions(conn: Conn) -> set[int]:
    """The migrations applied, read under the migrations lock (taken first: two processes
    creating the table at once collide in pg_type), held until the transaction ends."""
    await conn.execute(Q["migrations_lock"].sql)
    await conn.execute(Q["migrations_table"].sql)
    return {row["version"] for row in await conn.fetch(Q["migrations_applied"].sql)}


class PostgresStorage(SqlStore):
    dialect = "postgres"
    _sql: PostgresExecutor

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int = 10,
        acquire_timeout_s: float = 5.0,
        lock_timeout_ms: int = 5000,
        idle_in_transaction_ms: int = 10_000,
        listen_dsn: str | None = None,
    ) -> None:
        """`listen_dsn`: the LISTEN connection's direct (or session-mode) URL, given when `dsn`
        is a transaction-mode pooler (PgBouncer), which cannot carry a LISTEN: the pool then
        keeps no state in a session (executor.PostgresExecutor._pool_options)."""
        self.dsn = dsn
        self.listen_dsn = listen_dsn or dsn  # a session of its own: `dsn` unless pooled
        sql = PostgresExecutor(
            dsn,
            pool_size=pool_size,
            acquire_timeout_s=acquire_timeout_s,
            lock_timeout_ms=lock_timeout_ms,
            idle_in_transaction_ms=idle_in_transaction_ms,
            via_pooler=listen_dsn is not None,
        )
        super().__init__(sql, PostgresTransactions(sql))
        self._listening = asyncio.Event()

    # -- plumbing ----------------------------------------------------------------------

    async def open(self) -> None:
        await self._sql.open()

    async def close(self) -> None:
        await self._stop_wakeups()
        await self._sql.close()

    # -- lifecycle ---------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Under an advisory lock, in one transaction: PostgreSQL runs DDL transactionally."""

        async def apply(conn: Conn) -> list[int]:
            applied = []
            done = await _applied_versions(conn)
            for migration in migrations.pending("jobgate.storage.postgres", done):
                await conn.execute(migration.sql)
                await self._sql.fetch(
                    conn, "migration_record", version=migration.version, name=migration.name
                )
                applied.append(migration.version)
            return applied

        return await self._sql.run(apply, transaction=True)

    async def schema_version(self) -> int:
        """Read under the migrations lock, so a concurrent migrate is waited for."""

        async def read(conn: Conn) -> int:
            return max(await _applied_versions(conn), default=0)

        return await self._sql.run(read, transaction=True)

    async def database_now(self) -> datetime:
        row = await self._sql.read_one("database_now")
        assert row is not None
        moment: datetime = row["now"]
        return moment

    async def wal_position(self) -> WalPosition:
        """Where this server's WAL stands (services.replica_reads compares a standby's replay
        with a primary's insert position). Read-only; raises errors.StorageError."""
        row = await self._sql.read_one("wal_position")
        assert row is not None
        return WalPosition(in_recovery=bool(row["in_recovery"]), lsn=row["lsn"])

    async def listen(self) -> None:
        """Keep a LISTEN connection open (reconnecting with backoff) feeding `changes`."""
        if self._wakeups is None:
            self._wakeups = asyncio.create_task(self._listen_forever(), name="jobgate-listen")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._listening.wait(), timeout=5)

    async def _listen_forever(self) -> None:
        delay = 0.1
        while True:
            lost = asyncio.Event()
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self.listen_dsn, timeout=5)
                conn.add_termination_listener(_setter(lost))
                await conn.add_listener(CHANNEL, self._on_notify)
                self._listening.set()
                self.changes.everything_changed()  # whatever happened while we were away
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

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        kind, _, ids = str(payload).partition(":")
        if kind == "j":
            self.changes.jobs_changed(ids.split(","))
        elif kind == "q":
            self.changes.work_available()
        elif kind == "c":
            self.changes.cancel_requested(ids.split(","))
        elif kind == "o":
            self.changes.outbox_available()
        elif kind == "r":
            self.changes.reconcile_due()
        elif kind == "s":
            self.changes.streams_changed(ids.split(","))
