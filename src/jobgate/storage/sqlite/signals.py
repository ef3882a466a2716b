"""SignalStore on SQLite: what the alert gauges read at scrape time."""

from __future__ import annotations

from jobgate.storage import sql
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


class SqliteSignals:
    """Mixed into SqliteStorage, which supplies `_db`."""

    _db: SqliteDatabase

    async def webhook_endpoints_failing(self, *, min_attempts: int) -> dict[str, int]:
        params = {"min_attempts": min_attempts}
        rows = await self._db.read(
            lambda conn: conn.execute(Q["webhook_endpoints_failing"].sql, params).fetchall()
        )
        return {row["tenant_id"]: int(row["failing"]) for row in rows}
