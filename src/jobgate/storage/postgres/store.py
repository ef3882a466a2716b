"""The scale-out backend: PostgreSQL through asyncpg, SKIP LOCKED claims, LISTEN/NOTIFY wake-ups.

Every role may run in many processes on many machines against one database. Hot paths (submit,
claim, heartbeat, finish, get) are one statement each: asyncpg prepares and caches them per
connection, and the triggers of migration 0001 write the event log, the outbox and the
NOTIFY wake-ups inside the same statement. This module assembles the store: SqlStore over
PostgreSQL's executor, transactions and engine.
"""

from __future__ import annotations

from typing import TypeGuard

from jobgate.storage.postgres.engine import PostgresEngine
from jobgate.storage.postgres.executor import PostgresExecutor
from jobgate.storage.postgres.transactions import PostgresTransactions
from jobgate.storage.store.sql_store import SqlStore

PostgresStore = SqlStore[PostgresEngine]


def postgres_store(
    dsn: str,
    *,
    pool_size: int = 10,
    acquire_timeout_s: float = 5.0,
    lock_timeout_ms: int = 5000,
    idle_in_transaction_ms: int = 10_000,
    listen_dsn: str | None = None,
) -> PostgresStore:
    """A store on the PostgreSQL database `dsn` (not opened yet). `listen_dsn`: the LISTEN
    connection's direct (or session-mode) URL, given when `dsn` is a transaction-mode pooler
    (PgBouncer), which cannot carry a LISTEN: the pool then keeps no state in a session
    (executor.PostgresExecutor._pool_options)."""
    sql = PostgresExecutor(
        dsn,
        pool_size=pool_size,
        acquire_timeout_s=acquire_timeout_s,
        lock_timeout_ms=lock_timeout_ms,
        idle_in_transaction_ms=idle_in_transaction_ms,
        via_pooler=listen_dsn is not None,
    )
    engine = PostgresEngine(sql, dsn=dsn, listen_dsn=listen_dsn or dsn)
    return SqlStore(sql, PostgresTransactions(sql), engine)


def is_postgres(store: object) -> TypeGuard[PostgresStore]:
    """Whether `store` is a store on PostgreSQL (its engine: the DSNs, the WAL position)."""
    return isinstance(store, SqlStore) and isinstance(store.engine, PostgresEngine)
