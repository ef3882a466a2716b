"""LimitsStore on PostgreSQL: tenant limit overrides, queue accounting, retention."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from jobgate import errors
from jobgate.domain import costs
from jobgate.storage import shared
from jobgate.storage.records import LimitOverrides, QueueCounts, QueueLimit

T = TypeVar("T")


def _identity(value: Any) -> Any:
    return value


class PostgresLimits:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def _fetchrow(self, query_name: str, /, **params: Any) -> asyncpg.Record | None:
        raise NotImplementedError

    async def _with_conn(
        self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        raise NotImplementedError

    async def tenant_limits_set(
        self, *, tenant_id: str, overrides: LimitOverrides, now: datetime | None = None
    ) -> LimitOverrides:
        row = await self._fetchrow(
            "tenant_limits_upsert",
            tenant_id=tenant_id,
            now=now,
            **shared.overrides_params(overrides),
        )
        assert row is not None
        return shared.overrides_from_row(row, _identity)

    async def tenant_limits_all(self) -> dict[str, LimitOverrides]:
        rows = await self._fetch("tenant_limits_all")
        return {row["tenant_id"]: shared.overrides_from_row(row, _identity) for row in rows}

    async def queue_counts(self) -> QueueCounts:
        queued = {r["tenant_id"]: r["queued"] for r in await self._fetch("queued_by_tenant")}
        claimed = {
            r["tenant_id"]: r["claimed_total"] for r in await self._fetch("claimed_by_tenant")
        }
        return QueueCounts(queued, claimed)

    @staticmethod
    async def _run(conn: Any, query_name: str, /, **params: Any) -> list[Any]:
        raise NotImplementedError

    async def _admit_locked(self, conn: Any, limit: QueueLimit, adding: Mapping[str, int]) -> None:
        """Inside the submit's transaction: take the admission locks (tenants in order, then
        the global one), count exactly, and raise errors.QueueFull if the `adding` jobs (per
        tenant) would pass a bound. The locks hold until commit, so the insert that follows
        counts for the next submit: a bound holds exactly across processes."""
        if limit.tenant_max is not None:
            for tenant_id in sorted(adding):
                await self._run(conn, "queue_lock_tenant", tenant_id=tenant_id)
        if limit.total_max is not None:
            await self._run(conn, "queue_lock_total")
        if limit.tenant_max is not None:
            for tenant_id, count in adding.items():
                (row,) = await self._run(conn, "queued_count", tenant_id=tenant_id)
                if row["queued"] + count > limit.tenant_max:
                    raise errors.QueueFull("max_queued", 0)
        if limit.total_max is not None:
            (row,) = await self._run(conn, "queued_total")
            if row["queued"] + sum(adding.values()) > limit.total_max:
                raise errors.QueueFull("max_queued_total", 0)

    async def queued_count(self, *, tenant_id: str) -> int:
        row = await self._fetchrow("queued_count", tenant_id=tenant_id)
        return 0 if row is None else int(row["queued"])

    async def usage_tokens_since(self, *, since: datetime) -> dict[str, int]:
        rows = await self._fetch("usage_tokens_since", since=since)
        return {row["tenant_id"]: int(row["tokens"] or 0) for row in rows}

    async def usage_by_model_since(self, *, since: datetime) -> list[costs.UsageTotal]:
        rows = await self._fetch("usage_by_model_since", since=since)
        return [shared.usage_total_from_row(row) for row in rows]

    async def job_purge_expired(
        self, *, completed_before: datetime, limit: int, now: datetime | None = None
    ) -> int:
        rows = await self._fetch(
            "job_purge_expired", completed_before=completed_before, limit=limit, now=now
        )
        return len(rows)

    async def idempotency_purge_expired(self, *, limit: int, now: datetime | None = None) -> int:
        return len(await self._fetch("idempotency_purge_expired", limit=limit, now=now))
