"""SessionStore on PostgreSQL: dashboard sessions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg


class PostgresSessions:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def _fetchrow(self, query_name: str, /, **params: Any) -> asyncpg.Record | None:
        raise NotImplementedError

    async def dashboard_session_create(
        self, *, id_hash: str, key_hash: str, ttl_s: float, now: datetime | None = None
    ) -> str | None:
        await self._fetch("dashboard_session_sweep", now=now)
        row = await self._fetchrow(
            "dashboard_session_insert", id_hash=id_hash, key_hash=key_hash, ttl_s=ttl_s, now=now
        )
        return None if row is None else str(row["name"])

    async def dashboard_session_operator(
        self, *, id_hash: str, now: datetime | None = None
    ) -> str | None:
        row = await self._fetchrow("dashboard_session_operator", id_hash=id_hash, now=now)
        return None if row is None else str(row["name"])

    async def dashboard_session_delete(self, *, id_hash: str) -> None:
        await self._fetch("dashboard_session_delete", id_hash=id_hash)
