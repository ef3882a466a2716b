"""RolesStore on PostgreSQL: role heartbeats."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg


class PostgresRoles:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    async def _fetchrow(self, query_name: str, /, **params: Any) -> asyncpg.Record | None:
        raise NotImplementedError

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def role_heartbeat(
        self, *, role: str, instance: str, now: datetime | None = None
    ) -> None:
        await self._fetch("role_heartbeat_upsert", role=role, instance=instance, now=now)
        await self._fetch("role_heartbeat_prune", role=role, now=now)

    async def role_heartbeat_age_s(self, *, role: str, now: datetime | None = None) -> float | None:
        row = await self._fetchrow("role_heartbeat_age", role=role, now=now)
        return None if row is None or row["age_s"] is None else max(0.0, float(row["age_s"]))
