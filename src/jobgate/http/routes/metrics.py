"""GET /metrics: Prometheus exposition. Cluster-wide job gauges are read from the database at
scrape time (at most every two seconds); counters and histograms are this process's.

Tenant names appear in labels, so the route needs an operator key (`Authorization: Bearer
jgo_…`, or the dashboard's cookie) unless JOBGATE_METRICS_PUBLIC=1.
"""

from __future__ import annotations

import prometheus_client
from fastapi import APIRouter, Request
from starlette.responses import Response

from jobgate import errors, metrics
from jobgate.domain.states import JobState
from jobgate.http.console import dashboard
from jobgate.http.context import AppContext, Ctx
from jobgate.http.schemas.native import ProblemOut
from jobgate.services import alert_gauges, rate_limits

router = APIRouter(tags=["operations"])
_REFRESH_EVERY_S = 2.0


class _Gauges:
    refreshed_at = -1e18


async def refresh_job_gauges(ctx: AppContext) -> None:
    """Per-tenant queue depth, running jobs, longest wait, dead letters and spend today, from
    the database."""
    clock = ctx.jobs.clock
    if clock.monotonic() - _Gauges.refreshed_at < _REFRESH_EVERY_S:
        return
    overview = await ctx.storage.admin_overview()
    now = await ctx.storage.database_now()
    limits = ctx.jobs.limits
    spend = await limits.spend_today() if limits.priced else {}  # no prices: all spend is 0
    gauges = (
        metrics.JOBS,
        metrics.QUEUE_OLDEST_AGE_SECONDS,
        metrics.DEAD_LETTERED,
        metrics.TENANT_SPEND_USD_TODAY,
    )
    for gauge in gauges:
        gauge.clear()
    for tenant in overview:
        metrics.JOBS.labels(tenant.tenant_name, JobState.QUEUED.value).set(tenant.queued)
        metrics.JOBS.labels(tenant.tenant_name, JobState.RUNNING.value).set(tenant.running)
        waited_s = 0.0
        if tenant.oldest_due_at is not None:
            waited_s = max(0.0, (now - tenant.oldest_due_at).total_seconds())
        metrics.QUEUE_OLDEST_AGE_SECONDS.labels(tenant.tenant_name).set(waited_s)
        metrics.DEAD_LETTERED.labels(tenant.tenant_name).set(tenant.dead_lettered)
        spent = spend.get(tenant.tenant_id, 0)
        metrics.TENANT_SPEND_USD_TODAY.labels(tenant.tenant_name).set(float(spent))
    await alert_gauges.refresh(storage=ctx.storage, limits=limits, tenants=overview, now=now)
    await rate_limits.refresh_gauges(ctx.storage, ctx.jobs.providers.configs())
    _Gauges.refreshed_at = clock.monotonic()


@router.get(
    "/metrics",
    summary="Prometheus metrics (operator key unless public)",
    responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus text exposition"},
        401: {"model": ProblemOut, "content": {"application/problem+json": {}}},
        503: {"model": ProblemOut, "content": {"application/problem+json": {}}},
    },
)
async def metrics_endpoint(request: Request, ctx: Ctx) -> Response:
    if not ctx.settings.metrics_public:
        try:
            await dashboard.operator(request)
        except dashboard.LoginRequired:
            raise errors.Unauthorized(
                "metrics need an operator key: 'Authorization: Bearer jgo_…'"
            ) from None
    await refresh_job_gauges(ctx)
    return Response(
        prometheus_client.generate_latest(), media_type=prometheus_client.CONTENT_TYPE_LATEST
    )
