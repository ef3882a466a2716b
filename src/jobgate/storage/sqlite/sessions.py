"""SessionStore on SQLite: dashboard sessions."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from jobgate.storage import sql
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


class SqliteSessions:
    """Mixed into SqliteStorage, which supplies `_db` and `_now`."""

    _db: SqliteDatabase

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def dashboard_session_create(
        self, *, id_hash: str, key_hash: str, ttl_s: float, now: datetime | None = None
    ) -> str | None:
        params = {"id_hash": id_hash, "key_hash": key_hash, "ttl_s": ttl_s, "now": self._now(now)}

        def create(conn: sqlite3.Connection) -> str | None:
            conn.execute(Q["dashboard_session_sweep"].sql, {"now": params["now"]})
            row = conn.execute(Q["dashboard_session_insert"].sql, params).fetchone()
            return None if row is None else str(row["name"])

        return await self._db.write(create)

    async def dashboard_session_operator(
        self, *, id_hash: str, now: datetime | None = None
    ) -> str | None:
        params = {"id_hash": id_hash, "now": self._now(now)}
        row = await self._db.read(
            lambda conn: conn.execute(Q["dashboard_session_operator"].sql, params).fetchone()
        )
        return None if row is None else str(row["name"])

    async def dashboard_session_delete(self, *, id_hash: str) -> None:
        await self._db.write(
            lambda conn: conn.execute(Q["dashboard_session_delete"].sql, {"id_hash": id_hash})
        )
