"""The third part of a SQL store, beside its executor (statements) and its transactions: the
engine, what one dialect does with its database as a whole. `store.sql_store.SqlStore` delegates
its lifecycle to it; each dialect implements it once (postgres.engine, sqlite.engine)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Protocol

from jobgate.storage.records import WalPosition
from jobgate.wakeups import ChangeHub


class Engine(Protocol):
    """One dialect's database: open it, migrate it, watch it for other processes' commits, read
    its clock. Never runs a store method's statements (the executor does)."""

    dialect: str  # "postgres" or "sqlite": the store's `dialect`, shown by health and the console

    async def open(self) -> None:
        """Connect (PostgreSQL: the pool; SQLite: the writer and reader threads). Idempotent."""
        ...

    async def close(self) -> None:
        """Stop watching, then disconnect. Idempotent."""
        ...

    async def migrate(self) -> list[int]:
        """Apply pending migrations under a lock (safe from several processes); return them."""
        ...

    async def schema_version(self) -> int:
        """The highest applied migration, 0 on an empty database."""
        ...

    async def watch(self, changes: ChangeHub) -> None:
        """Start feeding `changes` with other processes' commits, in a task that runs until
        `close` (PostgreSQL: LISTEN, reconnecting with backoff; SQLite: a poll of the file's
        data version). Idempotent: a second call starts nothing."""
        ...

    async def database_now(self) -> datetime:
        """The database's clock, the authority for leases and schedules (SQLite: this host's)."""
        ...

    async def wal_position(self) -> WalPosition:
        """Where this server's write-ahead log stands, for services.replica_reads. Read-only;
        raises errors.StorageError, and on a database that streams no WAL to a replica
        (SQLite) always raises errors.ConfigError."""
        ...


async def stop_watching(task: asyncio.Task[None] | None) -> None:
    """Cancel an engine's watch task and wait until it has stopped."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
