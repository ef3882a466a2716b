"""RolesStore on SQLite: role heartbeats."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from jobgate.storage import sql
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


class SqliteRoles:
    """Mixed into SqliteStorage, which supplies `_db` and `_now`."""

    _db: SqliteDatabase

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def role_heartbeat(
        self, *, role: str, instance: str, now: datetime | None = None
    ) -> None:
        params = {"role": role, "instance": instance, "now": self._now(now)}

        def write(conn: sqlite3.Connection) -> None:
            conn.execute(Q["role_heartbeat_upsert"].sql, params)
            conn.execute(Q["role_heartbeat_prune"].sql, {"role": role, "now": params["now"]})

        await self._db.write(write)

    async def role_heartbeat_age_s(self, *, role: str, now: datetime | None = None) -> float | None:
        params = {"role": role, "now": self._now(now)}
        row = await self._db.read(
            lambda conn: conn.execute(Q["role_heartbeat_age"].sql, params).fetchone()
        )
        return None if row is None or row["age_s"] is None else max(0.0, float(row["age_s"]))
