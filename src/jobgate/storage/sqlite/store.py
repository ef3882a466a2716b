"""The embedded backend: one SQLite file in WAL mode, `synchronous=FULL`, one writer.

SQLite is one writer by design; the writer thread in `database` groups concurrent writes into
one commit. Several jobgate processes may share the file (busy_timeout waits for the lock),
but wake-ups then cross processes only by polling: scale out on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime
from typing import Any

from jobgate import errors, ids
from jobgate.clock import Clock, SystemClock
from jobgate.domain import events as domain_events
from jobgate.domain.states import JobState
from jobgate.storage import migrations
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q, SqliteExecutor
from jobgate.storage.sqlite.transactions import SqliteTransactions
from jobgate.storage.store.sql_store import SqlStore

FOREIGN_COMMIT_CHECK_S = 1.0


def _event_type(api: str, state: str, result_status: Any = None) -> str | None:
    status = result_status if isinstance(result_status, str) else None
    return domain_events.event_type_for(api, JobState(state), status)


def register_functions(conn: sqlite3.Connection) -> None:
    """The functions the triggers call; every connection that writes jobs needs them. Since
    migration 0008 the job trigger computes the event type in SQL: jobgate_event_type stays
    for a database still at an older version (the trigger of 0005 calls it)."""
    conn.create_function("jobgate_event_type", 2, _event_type, deterministic=True)
    conn.create_function("jobgate_event_type", 3, _event_type, deterministic=True)
    conn.create_function("jobgate_event_id", 3, ids.event_id, deterministic=True)


def path_from_url(url: str) -> str:
    """`sqlite:///relative.db`, `sqlite:////absolute.db` or `sqlite://:memory:`-free paths."""
    if not url.startswith("sqlite://"):
        raise errors.ConfigError("JOBGATE_DATABASE_URL", f"not a sqlite URL: {url!r}")
    path = url[len("sqlite://") :]
    if path.startswith("/"):
        path = path[1:]
    if not path:
        raise errors.ConfigError("JOBGATE_DATABASE_URL", "sqlite URL names no file")
    return path


class SqliteStorage(SqlStore):
    dialect = "sqlite"
    _sql: SqliteExecutor

    def __init__(self, path: str, *, clock: Clock | None = None) -> None:
        self.path = path
        self._clock = clock or SystemClock()
        self._db = SqliteDatabase(path, configure=register_functions)
        sql = SqliteExecutor(self._db, self._clock)
        super().__init__(sql, SqliteTransactions(self._db, sql, self._clock))

    @classmethod
    def from_url(cls, url: str, *, clock: Clock | None = None) -> SqliteStorage:
        return cls(path_from_url(url), clock=clock)

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        self._db.open()

    async def close(self) -> None:
        await self._stop_wakeups()
        await self._db.close()

    async def migrate(self) -> list[int]:
        """Statement by statement (a CREATE TRIGGER holds semicolons) on the writer thread."""
        now = self._sql.codec.now(None)

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

        return await self._db.write(apply)

    async def schema_version(self) -> int:
        return await self._db.read(lambda conn: max(_applied_versions(conn), default=0))

    async def listen(self) -> None:
        """Notice commits made by other processes sharing the file (there is no NOTIFY on
        SQLite): once a second, and only then wake every waiter to re-read."""
        if self._wakeups is None:
            self._wakeups = asyncio.create_task(
                self._watch_foreign_commits(), name="jobgate-sqlite-watch"
            )

    async def _watch_foreign_commits(self) -> None:
        seen: int | None = None
        while True:
            try:
                version = await self._db.foreign_commits()
            except errors.StorageError:
                version = None
            if version is not None and seen is not None and version != seen:
                self.changes.everything_changed()
            seen = version if version is not None else seen
            await asyncio.sleep(FOREIGN_COMMIT_CHECK_S)

    async def database_now(self) -> datetime:
        return self._clock.now()


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
