"""The embedded backend: one SQLite file in WAL mode, `synchronous=FULL`, one writer.

SQLite is one writer by design; the writer thread in `database` groups concurrent writes into
one commit. Several jobgate processes may share the file (busy_timeout waits for the lock),
but wake-ups then cross processes only by polling: scale out on PostgreSQL. This module
assembles the store: SqlStore over SQLite's executor, transactions and engine.
"""

from __future__ import annotations

import sqlite3
from typing import Any, TypeGuard

from jobgate import errors, ids
from jobgate.clock import Clock, SystemClock
from jobgate.domain import events as domain_events
from jobgate.domain.states import JobState
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.engine import SqliteEngine
from jobgate.storage.sqlite.executor import SqliteExecutor
from jobgate.storage.sqlite.transactions import SqliteTransactions
from jobgate.storage.store.sql_store import SqlStore

SqliteStore = SqlStore[SqliteEngine]


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


def sqlite_store(path: str, *, clock: Clock | None = None) -> SqliteStore:
    """A store on the SQLite file `path` (not opened yet); `clock` is the database's clock."""
    clock = clock or SystemClock()
    database = SqliteDatabase(path, configure=register_functions)
    sql = SqliteExecutor(database, clock)
    transactions = SqliteTransactions(database, sql, clock)
    return SqlStore(sql, transactions, SqliteEngine(database, sql, clock))


def sqlite_store_for_url(url: str, *, clock: Clock | None = None) -> SqliteStore:
    """A store on the file a `sqlite:///path` URL names."""
    return sqlite_store(path_from_url(url), clock=clock)


def is_sqlite(store: object) -> TypeGuard[SqliteStore]:
    """Whether `store` is a store on SQLite (its engine: the file's path and connections)."""
    return isinstance(store, SqlStore) and isinstance(store.engine, SqliteEngine)
