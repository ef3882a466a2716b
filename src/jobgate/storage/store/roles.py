"""RolesStore on both dialects: role heartbeats, and which roles have work."""

from __future__ import annotations

from datetime import datetime

from jobgate.storage.executor import SqlPart

# The roles `roles_with_work` answers for, as its columns name them.
ROLES_WITH_WORK = ("worker", "batches", "dispatcher", "reaper")


class RoleQueries(SqlPart):
    async def role_heartbeat(
        self, *, role: str, instance: str, now: datetime | None = None
    ) -> None:
        at = self._sql.codec.now(now)
        await self._sql.write_count("role_heartbeat_upsert", role=role, instance=instance, now=at)
        await self._sql.write_count("role_heartbeat_prune", role=role, now=at)

    async def role_heartbeat_forget(self, *, role: str, instance: str) -> None:
        await self._sql.write_count("role_heartbeat_forget", role=role, instance=instance)

    async def role_heartbeat_age_s(self, *, role: str, now: datetime | None = None) -> float | None:
        row = await self._sql.read_one(
            "role_heartbeat_age", role=role, now=self._sql.codec.now(now)
        )
        return None if row is None or row["age_s"] is None else max(0.0, float(row["age_s"]))

    async def role_heartbeat_ages(self, *, now: datetime | None = None) -> dict[str, float]:
        rows = await self._sql.read("role_heartbeat_ages", now=self._sql.codec.now(now))
        return {row["role"]: max(0.0, float(row["age_s"])) for row in rows}

    async def roles_with_work(self) -> frozenset[str]:
        row = await self._sql.read_one("roles_with_work")
        assert row is not None
        return frozenset(role for role in ROLES_WITH_WORK if row[role])
