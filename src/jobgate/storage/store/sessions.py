"""SessionStore on both dialects: dashboard sessions."""

from __future__ import annotations

from datetime import datetime

from jobgate.storage.executor import SqlPart


class SessionQueries(SqlPart):
    async def dashboard_session_create(
        self, *, id_hash: str, key_hash: str, ttl_s: float, now: datetime | None = None
    ) -> str | None:
        at = self._sql.codec.now(now)
        await self._sql.write_count("dashboard_session_sweep", now=at)
        row = await self._sql.write_one(
            "dashboard_session_insert", id_hash=id_hash, key_hash=key_hash, ttl_s=ttl_s, now=at
        )
        return None if row is None else str(row["name"])

    async def dashboard_session_operator(
        self, *, id_hash: str, now: datetime | None = None
    ) -> str | None:
        row = await self._sql.read_one(
            "dashboard_session_operator", id_hash=id_hash, now=self._sql.codec.now(now)
        )
        return None if row is None else str(row["name"])

    async def dashboard_session_delete(self, *, id_hash: str) -> None:
        await self._sql.write_count("dashboard_session_delete", id_hash=id_hash)
