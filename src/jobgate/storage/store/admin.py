"""The admin store over either dialect: operator keys, their dashboard sessions, and what
operators see across tenants."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate import errors
from jobgate.domain import ranges
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import EndpointHealth, TenantOverview


class AdminQueries(SqlPart):
    async def operator_key_create(
        self,
        *,
        key_id: str,
        name: str,
        key_hash: str,
        key_prefix: str,
        now: datetime | None = None,
    ) -> None:
        await self._sql.write_count(
            "operator_key_insert",
            id=key_id,
            name=name,
            key_hash=key_hash,
            key_prefix=key_prefix,
            now=self._sql.codec.now(now),
        )

    async def operator_key_name(self, *, key_hash: str) -> str | None:
        row = await self._sql.read_one("operator_key_name", key_hash=key_hash)
        return None if row is None else str(row["name"])

    async def operator_key_count(self) -> int:
        row = await self._sql.read_one("operator_key_count")
        return 0 if row is None else int(row["keys"])

    # -- dashboard sessions (SessionStore) ------------------------------------------------

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

    async def admin_overview(self, *, now: datetime | None = None) -> list[TenantOverview]:
        codec = self._sql.codec
        rows = await self._sql.read(
            "admin_overview",
            now=codec.now(now),
            counted=ranges.QUEUE_COUNTED,
            priorities=codec.json(list(range(ranges.PRIORITY_MIN, ranges.PRIORITY_MAX + 1))),
        )
        return [self._decode.record(TenantOverview, row) for row in rows]

    async def admin_job_list(
        self,
        *,
        tenant_id: str | None = None,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        if after is not None and await self._sql.read_one("job_get", id=after) is None:
            raise errors.InvalidRequest(f"no job with id {after!r}", param="after")
        codec = self._sql.codec
        rows = await self._sql.read(
            "admin_job_list",
            tenant_id=tenant_id,
            states=codec.json(None if states is None else [str(s) for s in states]),
            dead_lettered=codec.flag(dead_lettered),
            after_id=after,
            limit=limit,
        )
        return [self._decode.job(row) for row in rows]

    async def admin_endpoint_health(self, *, min_attempts: int) -> list[EndpointHealth]:
        rows = await self._sql.read("admin_endpoint_health", min_attempts=min_attempts)
        return [self._decode.record(EndpointHealth, row) for row in rows]
