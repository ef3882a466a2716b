"""The scrape-time gauges the shipped alerts read beyond queue depth (alerts.py): failing
webhook endpoints, and each tenant's usage today against its daily budgets. Cluster-wide,
from the database, like the job gauges of http/routes/metrics.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Protocol

from jobgate import metrics
from jobgate.config import TenantLimits
from jobgate.storage.records import TenantOverview

FAILING_AFTER_ATTEMPTS = 3  # immediately, 5 s, 5 min: a receiver down for minutes, not a blip


class SignalStorage(Protocol):
    async def webhook_endpoints_failing(self, *, min_attempts: int) -> dict[str, int]: ...

    async def usage_tokens_since(self, *, day: date) -> dict[str, int]: ...


class TenantLimitsReader(Protocol):
    async def for_tenant(self, tenant_id: str) -> TenantLimits: ...


async def refresh(
    *,
    storage: SignalStorage,
    limits: TenantLimitsReader,
    tenants: Sequence[TenantOverview],
    now: datetime,
) -> None:
    """Set the gauges for every tenant in `tenants` (the overview the job gauges used);
    `now` is the database's clock, whose UTC day the token count covers."""
    failing = await storage.webhook_endpoints_failing(min_attempts=FAILING_AFTER_ATTEMPTS)
    tokens = await storage.usage_tokens_since(day=now.astimezone(UTC).date())
    gauges = (
        metrics.WEBHOOK_ENDPOINTS_FAILING,
        metrics.TENANT_TOKENS_TODAY,
        metrics.TENANT_DAILY_TOKEN_BUDGET,
        metrics.TENANT_DAILY_COST_BUDGET_USD,
    )
    for gauge in gauges:
        gauge.clear()
    for tenant in tenants:
        name = tenant.tenant_name
        metrics.WEBHOOK_ENDPOINTS_FAILING.labels(name).set(failing.get(tenant.tenant_id, 0))
        metrics.TENANT_TOKENS_TODAY.labels(name).set(tokens.get(tenant.tenant_id, 0))
        budget = await limits.for_tenant(tenant.tenant_id)  # cached by the limits service
        if budget.daily_token_budget > 0:
            metrics.TENANT_DAILY_TOKEN_BUDGET.labels(name).set(budget.daily_token_budget)
        if budget.daily_cost_budget_usd > 0:
            metrics.TENANT_DAILY_COST_BUDGET_USD.labels(name).set(budget.daily_cost_budget_usd)
