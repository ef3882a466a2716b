"""AdminStore on PostgreSQL: what operators see across tenants."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.storage.records import EndpointHealth, TenantOverview
from jobgate.storage.rows import RowDecoder


class PostgresAdmin:
    """Mixed into PostgresStorage, which supplies the query helpers and `_decode`."""

    _decode: RowDecoder

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def _fetchrow(self, query_name: str, /, **params: Any) -> asyncpg.Record | None:
        raise NotImplementedError

    async def job_get(self, *, job_id: str, tenant_id: str | None = None) -> Job | None:
        raise NotImplementedError

    async def operator_key_create(
        self,
        *,
        key_id: str,
        name: str,
        key_hash: str,
        key_prefix: str,
        now: datetime | None = None,
    ) -> None:
        await self._fetch(
            "operator_key_insert",
            id=key_id,
            name=name,
            key_hash=key_hash,
            key_prefix=key_prefix,
            now=now,
        )

    async def operator_key_name(self, *, key_hash: str) -> str | None:
        row = await self._fetchrow("operator_key_name", key_hash=key_hash)
        return None if row is None else str(row["name"])

    async def operator_key_count(self) -> int:
        row = await self._fetchrow("operator_key_count")
        return 0 if row is None else int(row["keys"])

    async def admin_overview(self, *, now: datetime | None = None) -> list[TenantOverview]:
        return [
            TenantOverview(
                tenant_id=row["tenant_id"],
                tenant_name=row["tenant_name"],
                queued=row["queued"],
                running=row["running"],
                oldest_due_at=row["oldest_due_at"],
                dead_lettered=row["dead_lettered"],
            )
            for row in await self._fetch("admin_overview", now=now)
        ]

    async def admin_job_list(
        self,
        *,
        tenant_id: str | None = None,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        if after is not None and await self.job_get(job_id=after) is None:
            raise errors.InvalidRequest(f"no job with id {after!r}", param="after")
        rows = await self._fetch(
            "admin_job_list",
            tenant_id=tenant_id,
            states=None if states is None else [str(s) for s in states],
            dead_lettered=dead_lettered,
            after_id=after,
            limit=limit,
        )
        return [self._decode.job(row) for row in rows]

    async def admin_endpoint_health(self) -> list[EndpointHealth]:
        return [
            EndpointHealth(
                endpoint_id=row["endpoint_id"],
                tenant_name=row["tenant_name"],
                url=row["url"],
                disabled=row["disabled"],
                disabled_reason=row["disabled_reason"],
                pending=row["pending"],
                succeeded=row["succeeded"],
                failed=row["failed"],
                last_status_code=row["last_status_code"],
                last_error=row["last_error"],
            )
            for row in await self._fetch("admin_endpoint_health")
        ]
