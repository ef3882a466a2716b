"""The rate limits' transactions on SQLite (part of Transactions): inside one write operation of the
single writer (which serialises every update, so no row locks), and a reroute in two statements,
since SQLite's DML cannot write the event in the same statement as PostgreSQL's does."""

from __future__ import annotations

import sqlite3

from jobgate.domain.rate_limits import Bucket
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q, SqliteExecutor, json_text
from jobgate.storage.store.rate_limits import held_states
from jobgate.storage.transaction_requests import (
    A,
    BucketChange,
    Change,
    KeyPurgeWrite,
    Reroute,
    record_params,
)


def buckets_changed(
    conn: sqlite3.Connection, buckets: list[Bucket], now: float, change: Change[A]
) -> A:
    """Within the caller's write operation on `conn`: apply `change` to `buckets` at `now`
    (Unix seconds) and write the new states (rows created if missing)."""
    keys = [{"provider": b.provider, "model": b.model} for b in buckets]
    read = {"buckets": json_text(keys), "now": now}
    rows = conn.execute(Q["rate_limit_read"].sql, read).fetchall()
    states, answer = change(held_states(buckets, rows), now)
    if states is None:
        return answer
    for key, state in zip(keys, states, strict=True):
        conn.execute(Q["rate_limit_ensure"].sql, key)
        conn.execute(
            Q["rate_limit_write"].sql,
            {**key, "requests_at": state.requests_at, "tokens_at": state.tokens_at},
        )
    return answer


class SqliteRateLimitWrites:
    _db: SqliteDatabase
    _sql: SqliteExecutor

    async def buckets_locked(self, request: BucketChange[A]) -> A:
        at, buckets, change = self._sql.codec.now(request.now), request.buckets, request.change
        return await self._db.write(lambda conn: buckets_changed(conn, buckets, at, change))

    async def key_purge_write(self, request: KeyPurgeWrite) -> int:
        params = record_params(request)
        return await self._db.write(
            lambda conn: conn.execute(Q["rate_limit_key_purge"].sql, params).rowcount
        )

    async def reroute_write(self, request: Reroute) -> bool:
        """Two statements in one write: SQLite's UPDATE cannot also insert the event."""
        params = record_params(request)

        def run(conn: sqlite3.Connection) -> bool:
            row = conn.execute(Q["job_reroute"].sql, params).fetchone()
            if row is None:
                return False
            conn.execute(Q["job_reroute_event"].sql, {**params, "seq": row["event_seq"]})
            return True

        return await self._db.write(run)
