"""RolesStore on both dialects: role heartbeats."""

from __future__ import annotations

from datetime import datetime

from jobgate.storage.executor import SqlPart


class RoleQueries(SqlPart):
    async def role_heartbeat(
        self, *, role: str, instance: str, now: datetime | None = None
    ) -> None:
        at = self._sql.codec.now(now)
        await self._sql.write_count("role_heartbeat_upsert", role=role, instance=instance, now=at)
        await self._sql.write_count("role_heartbeat_prune", role=role, now=at)

    async def role_heartbeat_age_s(self, *, role: str, now: datetime | None = None) -> float | None:
        row = await self._sql.read_one(
            "role_heartbeat_age", role=role, now=self._sql.codec.now(now)
        )
        return None if row is None or row["age_s"] is None else max(0.0, float(row["age_s"]))
