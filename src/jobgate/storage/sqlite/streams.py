"""OutputStreamStore on SQLite: appends go through the single writer (group commit with every
other write waiting at that moment); readers are woken in process, and other processes
sharing the file notice through data_version polling."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from jobgate import errors
from jobgate.clock import from_unix
from jobgate.domain.job import Lease
from jobgate.storage import sql
from jobgate.storage.records import OutputChunk
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.wakeups import ChangeHub

Q = sql.load("jobgate.storage.sqlite")


def _chunk(row: Any) -> OutputChunk:
    return OutputChunk(
        row["job_id"], row["seq"], row["generation"], row["text"], from_unix(row["created_at"])
    )


class SqliteStreams:
    """Mixed into SqliteStorage, which supplies `_db`, `_now` and `changes`."""

    _db: SqliteDatabase
    changes: ChangeHub

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def job_output_append(
        self, *, lease: Lease, text: str, now: datetime | None = None
    ) -> OutputChunk:
        params = {
            "job_id": lease.job_id,
            "lease_token": lease.token,
            "text": text,
            "now": self._now(now),
        }

        def append(conn: sqlite3.Connection) -> Any:
            return conn.execute(Q["job_output_append"].sql, params).fetchone()

        row = await self._db.write(append)
        if row is None:
            raise errors.LeaseLost(lease.job_id)
        self.changes.streams_changed([lease.job_id])
        return _chunk(row)

    async def job_output_read(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[OutputChunk]:
        params = {"job_id": job_id, "after_seq": after_seq, "limit": limit}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["job_output_read"].sql, params).fetchall()
        )
        return [_chunk(row) for row in rows]

    async def job_output_delete(self, *, job_id: str) -> int:
        def delete(conn: sqlite3.Connection) -> int:
            return len(conn.execute(Q["job_output_delete"].sql, {"job_id": job_id}).fetchall())

        return await self._db.write(delete)
