"""SQLite's executor and codec: reads on a reader thread (point reads inline), writes through
the writer thread.

A write joins the writer's group commit (`SqliteDatabase.write`) and returns once committed.
SQLite stores times as REAL Unix seconds and JSON as text; its clock is this host's (the
store's `Clock`, so tests can move it).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

import orjson

from jobgate.clock import Clock
from jobgate.storage import sql, text_escape
from jobgate.storage.executor import Codec, Row
from jobgate.storage.rows import tolerant_json, unix_time
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")

_loads = tolerant_json(orjson.loads)


def json_text(value: Any) -> str | None:
    """A JSON parameter as SQLite stores it: text, or NULL."""
    return None if value is None else text_escape.json_dumps(value).decode()


# How many decoded times SqliteCodec keeps: the jobs of one claim share their claim's times
# (updated_at, started_at, lease_expires_at, often deadline_at) and those of their submit batch.
_RECENT_TIMES_MAX = 1024


class SqliteCodec:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # REAL seconds -> the datetime decoded from them (a cache; reader threads share it,
        # and each dict operation is atomic, so at worst a time is decoded twice).
        self._recent_times: dict[Any, datetime] = {}

    def now(self, now: datetime | None) -> float:
        # On SQLite the database's clock is this host's clock.
        return (now or self._clock.now()).timestamp()

    def time(self, value: datetime | None) -> float | None:
        return None if value is None else value.timestamp()

    def json(self, value: Any) -> str | None:
        return json_text(value)

    def flag(self, value: bool | None) -> int | None:
        return None if value is None else int(value)

    def time_out(self, value: Any) -> datetime | None:
        """A REAL time, clamped to what Python holds; a value that is no time at all raises
        (the row decoder then names the column damaged)."""
        if value is None:
            return None
        recent = self._recent_times
        moment = recent.get(value)
        if moment is None:
            moment = unix_time(value)
            if moment is None:
                raise ValueError("not a time")
            if len(recent) >= _RECENT_TIMES_MAX:
                recent.clear()
            recent[value] = moment
        return moment

    def json_out(self, value: Any) -> Any:
        return None if value is None else _loads(value)


# Reads run inline (SqliteDatabase.read_point): those of one row by its primary or a unique
# key (the status read, a long poll's re-read, an API key's tenant) and a queued job's place in
# its line, a covering index scan of at most ranges.QUEUE_POSITION_COUNTED entries: inline, such
# a read costs a tenth of its trip through a reader thread at the head of a line of thousands,
# and half of it deep in that line.
_POINT_READS = frozenset(
    {
        "job_get",
        "job_get_for_tenant",
        "job_view_for_tenant",
        "job_status_for_tenant",
        "job_without_input_for_tenant",
        "api_key_tenant",
        "job_queue_position",
    }
)


def _all(conn: sqlite3.Connection, query: str, params: dict[str, Any]) -> list[Row]:
    return list(conn.execute(Q[query].sql, params).fetchall())


def _one(conn: sqlite3.Connection, query: str, params: dict[str, Any]) -> Row | None:
    row: Row | None = conn.execute(Q[query].sql, params).fetchone()
    return row


def _count(conn: sqlite3.Connection, query: str, params: dict[str, Any]) -> int:
    cursor = conn.execute(Q[query].sql, params)
    cursor.fetchall()  # a RETURNING statement counts its rows only once they are read
    return cursor.rowcount


class SqliteExecutor:
    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self.codec: Codec = SqliteCodec(clock)
        self._db = db

    async def read(self, query: str, /, **params: Any) -> list[Row]:
        return await self._db.read(lambda conn: _all(conn, query, params))

    async def read_one(self, query: str, /, **params: Any) -> Row | None:
        if query in _POINT_READS:
            return await self._db.read_point(lambda conn: _one(conn, query, params))
        return await self._db.read(lambda conn: _one(conn, query, params))

    async def write(self, query: str, /, **params: Any) -> list[Row]:
        return await self._db.write(lambda conn: _all(conn, query, params))

    async def write_one(self, query: str, /, **params: Any) -> Row | None:
        rows = await self.write(query, **params)  # all read: a RETURNING statement finishes
        return rows[0] if rows else None

    async def write_count(self, query: str, /, **params: Any) -> int:
        return await self._db.write(lambda conn: _count(conn, query, params))
