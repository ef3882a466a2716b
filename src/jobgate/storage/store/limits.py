"""The limits store over either dialect: tenant limit overrides, queue accounting, token usage
for budgets, and purging what has expired."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, date, datetime, time
from typing import Any

from jobgate.domain import costs
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import LimitOverrides, QueueCounts


class LimitQueries(SqlPart):
    async def tenant_limits_set(
        self, *, tenant_id: str, overrides: LimitOverrides, now: datetime | None = None
    ) -> LimitOverrides:
        codec = self._sql.codec
        params = dataclasses.asdict(overrides)
        for name in ("allowed_models", "allowed_providers"):  # JSON arrays
            params[name] = codec.json(None if params[name] is None else list(params[name]))
        for name in ("daily_cost_budget_usd", "daily_cost_budget_usd_per_key"):
            cost = params[name]
            params[name] = None if cost is None else float(cost)
        row = await self._sql.write_one(
            "tenant_limits_upsert", tenant_id=tenant_id, now=codec.now(now), **params
        )
        assert row is not None
        return self._decode.record(LimitOverrides, row)

    async def tenant_limits_all(self) -> dict[str, LimitOverrides]:
        rows = await self._sql.read("tenant_limits_all")
        return {row["tenant_id"]: self._decode.record(LimitOverrides, row) for row in rows}

    async def queue_counts(self) -> QueueCounts:
        queued = {r["tenant_id"]: r["queued"] for r in await self._sql.read("queued_by_tenant")}
        claimed = {
            r["tenant_id"]: r["claimed_total"] for r in await self._sql.read("claimed_by_tenant")
        }
        return QueueCounts(queued, claimed)

    def _midnight(self, day: date) -> Any:
        """The `:since` parameter: the start of `day`, UTC (the rollup keeps whole days)."""
        return self._sql.codec.time(datetime.combine(day, time(0), tzinfo=UTC))

    async def usage_tokens_since(self, *, day: date) -> dict[str, int]:
        rows = await self._sql.read("usage_tokens_since", since=self._midnight(day))
        return {row["tenant_id"]: int(row["tokens"] or 0) for row in rows}

    async def usage_by_model_since(self, *, day: date) -> list[costs.UsageTotal]:
        rows = await self._sql.read("usage_by_model_since", since=self._midnight(day))
        return [self._decode.record(costs.UsageTotal, row) for row in rows]

    async def usage_by_key_since(
        self, *, day: date, tenant_ids: Sequence[str]
    ) -> list[costs.UsageTotal]:
        if not tenant_ids:
            return []
        rows = await self._sql.read(
            "usage_by_key_since",
            since=self._midnight(day),
            tenant_ids=self._sql.codec.json(sorted(set(tenant_ids))),
        )
        return [self._decode.record(costs.UsageTotal, row) for row in rows]

    async def job_purge_expired(
        self, *, completed_before: datetime, limit: int, now: datetime | None = None
    ) -> int:
        codec = self._sql.codec
        return await self._sql.write_count(
            "job_purge_expired",
            completed_before=codec.time(completed_before),
            limit=limit,
            now=codec.now(now),
        )

    async def idempotency_purge_expired(self, *, limit: int, now: datetime | None = None) -> int:
        return await self._sql.write_count(
            "idempotency_purge_expired", limit=limit, now=self._sql.codec.now(now)
        )
