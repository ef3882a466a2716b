"""Storage for tenant limits, queue accounting and retention (a part of the Storage contract)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from jobgate.domain import costs
from jobgate.storage.records import LimitOverrides, QueueCounts


class LimitsStore(Protocol):
    async def tenant_limits_set(
        self, *, tenant_id: str, overrides: LimitOverrides, now: datetime | None = None
    ) -> LimitOverrides:
        """Store a tenant's overrides (replacing the previous ones); None fields clear them."""
        ...

    async def tenant_limits_all(self) -> dict[str, LimitOverrides]:
        """Every tenant's stored overrides, by tenant id."""
        ...

    async def queue_counts(self) -> QueueCounts:
        """Queued jobs per tenant and claims per tenant so far (cheap enough to poll)."""
        ...

    async def queued_count(self, *, tenant_id: str) -> int:
        """The exact number of a tenant's queued jobs."""
        ...

    async def usage_tokens_since(self, *, since: datetime) -> dict[str, int]:
        """Tokens billed per tenant since `since` (completions minus refunds)."""
        ...

    async def usage_by_model_since(self, *, since: datetime) -> list[costs.UsageTotal]:
        """Tokens billed since `since` per (tenant, provider, model), completions minus
        refunds, in no particular order. Read-only; pricing them is the caller's business."""
        ...

    async def job_purge_expired(
        self, *, completed_before: datetime, limit: int, now: datetime | None = None
    ) -> int:
        """Erase input and result of terminal jobs completed before the cut-off (tombstones
        stay). Returns how many were purged."""
        ...

    async def idempotency_purge_expired(self, *, limit: int, now: datetime | None = None) -> int:
        """Forget idempotency keys past their expiry (kept at least 24 h by construction)."""
        ...
