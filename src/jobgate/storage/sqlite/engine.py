"""SQLite's engine (storage.engine): the file's writer and reader threads, migrations on the
writer thread, and a watch for commits made by other processes sharing the file (SQLite has no
NOTIFY). Its clock is this host's; it streams no WAL to a replica."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime

from jobgate import errors
from jobgate.clock import Clock
from jobgate.storage import migrations
from jobgate.storage.engine import stop_watching
from jobgate.storage.records import WalPosition
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q, SqliteExecutor
from jobgate.wakeups import ChangeHub

FOREIGN_COMMIT_CHECK_S = 1.0


class SqliteEngine:
    dialect = "sqlite"

    def __init__(self, database: SqliteDatabase, sql: SqliteExecutor, clock: Clock) -> None:
        """`database`: the connections the executor and transactions run on (its writer
        thread migrates and asks for the file's data version)."""
        self.database = database
        self.path = database.path
        self.executor = sql
        self._clock = clock
        self._watch: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self.database.open()

    async def close(self) -> None:
        watch, self._watch = self._watch, None
        await stop_watching(watch)
        await self.database.close()

    async def migrate(self) -> list[int]:
        """Statement by statement (a CREATE TRIGGER holds semicolons) on the writer thread."""
        now = self.executor.codec.now(None)

        def apply(conn: sqlite3.Connection) -> list[int]:
            applied = []
            for migration in migrations.pending("jobgate.storage.sqlite", _applied_versions(conn)):
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    Q["migration_record"].sql,
                    {"version": migration.version, "name": migration.name, "now": now},
                )
                applied.append(migration.version)
            return applied

        return await self.database.write(apply)

    async def schema_version(self) -> int:
        return await self.database.read(lambda conn: max(_applied_versions(conn), default=0))

    async def watch(self, changes: ChangeHub) -> None:
        """Notice commits made by other processes sharing the file: once a second, and only
        then wake every waiter to re-read (this process's own commits wake it directly)."""
        if self._watch is None:
            self._watch = asyncio.create_task(
                self._watch_foreign_commits(changes), name="jobgate-sqlite-watch"
            )

    async def _watch_foreign_commits(self, changes: ChangeHub) -> None:
        seen: int | None = None
        while True:
            try:
                version = await self.database.foreign_commits()
            except errors.StorageError:
                version = None
            if version is not None and seen is not None and version != seen:
                changes.everything_changed()
            seen = version if version is not None else seen
            await asyncio.sleep(FOREIGN_COMMIT_CHECK_S)

    async def database_now(self) -> datetime:
        return self._clock.now()

    async def wal_position(self) -> WalPosition:
        """SQLite's WAL is local to the file: no replica streams it."""
        raise errors.ConfigError(
            "JOBGATE_READ_DATABASE_URL", "a read replica needs a PostgreSQL JOBGATE_DATABASE_URL"
        )


def _applied_versions(conn: sqlite3.Connection) -> set[int]:
    conn.execute(Q["migrations_table"].sql)
    return {row[0] for row in conn.execute(Q["migrations_applied"].sql)}


def _statements(script: str) -> list[str]:
    """Split a migration into statements; CREATE TRIGGER bodies hold semicolons of their own."""
    statements: list[str] = []
    current: list[str] = []
    for line in script.splitlines():
        current.append(line)
        candidate = "\n".join(current).strip()
        if candidate.endswith(";") and sqlite3.complete_statement(candidate):
            statements.append(candidate)
            current = []
    tail = "\n".join(current).strip()
    if tail and not all(line.strip().startswith("--") or not line.strip() for line in current):
        statements.append(tail)
    return statements
