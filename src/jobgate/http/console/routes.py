"""The operator console's pages over the dashboard's sign-in: the live overview with charts
of the last hour, job search, the job page, and bulk actions by filter with a confirmation.

Live parts refresh by polling small HTML fragments (`/dashboard/live/...`) from a script
jobgate serves itself (`/dashboard/static/console.js`): no build step, no CDN. Each live
fragment is the same template part the page renders, so a refresh and a reload agree.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from datetime import timedelta
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from jobgate import errors
from jobgate.clock import from_unix
from jobgate.domain import ranges, redaction, rollups
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.states import JobState
from jobgate.http.console import charts as charts
from jobgate.http.console import views as views
from jobgate.http.console.dashboard import Operator, render, same_origin
from jobgate.http.context import AppContext, Ctx
from jobgate.http.object_ids import JobId
from jobgate.services.dashboard_views import TEST_MODEL

router = APIRouter(prefix="/dashboard", include_in_schema=False)
PAGE = 50
MAX_FORM_BYTES = 8192
MAX_NAME_CHARS = 200
MAX_PROMPT_CHARS = 2000
_SCRIPT = resources.files("jobgate.http").joinpath("static/console.js").read_text()
Name = Annotated[str, Query(max_length=200, pattern=r"^[^\x00]*$")]


@router.get("/static/console.js")
async def console_script() -> Response:
    return Response(_SCRIPT, media_type="text/javascript")


# -- overview ----------------------------------------------------------------------------


async def _overview(ctx: AppContext, tenant: str, provider: str) -> dict[str, Any]:
    read = await ctx.dashboard.overview()
    tenants, transitions, depth, now = read.tenants, read.transitions, read.depth, read.now
    names = {t.tenant_id: t.tenant_name for t in tenants}
    by_name = {name: tenant_id for tenant_id, name in names.items()}
    scope = rollups.Scope(
        tenant_id=by_name.get(tenant, "") if tenant else None, provider=provider or None
    )
    rolled = rollups.rollup(transitions, depth, now=now, scope=scope, capped=read.capped)
    providers = sorted({d.provider for d in depth} | {t.provider for t in transitions})
    waits = await ctx.waits.counts()
    return {
        "tenants": tenants,
        "waits": {reason: count for reason, count in waits.by_reason.items() if count},
        "waits_exact": waits.exact,
        "pauses": len(await ctx.pauses.all()),
        "storage_ok": read.storage_ok,
        "dialect": read.dialect,
        "totals": {
            "queued": sum(t.queued for t in tenants),
            "queued_exact": all(t.queued_exact for t in tenants),
            "running": sum(t.running for t in tenants),
            "dead_lettered": sum(t.dead_lettered for t in tenants),
            "failing_endpoints": sum(1 for e in read.endpoints if e.disabled or e.failing),
        },
        "oldest": min((t.oldest_due_at for t in tenants if t.oldest_due_at), default=None),
        "charts": _charts(rolled),
        "complete": rolled.complete,
        "depth_exact": rolled.depth_exact,
        "queue_counted": ranges.QUEUE_COUNTED,
        "summaries": rollups.summaries(transitions, depth),
        "names": names,
        "scope": {"tenant": tenant, "provider": provider},
        "providers": providers,
        "scope_query": urllib.parse.urlencode(
            {k: v for k, v in (("tenant", tenant), ("provider", provider)) if v}
        ),
        # Nothing queued, running or dead, and nothing ran this hour: offer a first job.
        "empty": not transitions
        and not any(t.queued or t.running or t.dead_lettered for t in tenants),
        "test_model": TEST_MODEL,
    }


def _charts(rolled: rollups.Rollup) -> list[Any]:
    return [
        charts.line_chart(
            "chart-throughput",
            "Throughput (jobs per minute)",
            [
                charts.Line(JobState.SUCCEEDED.value, [float(v) for v in rolled.succeeded], "s1"),
                charts.Line("errors", [float(v) for v in rolled.errors], "s3"),
            ],
            unit=charts.count,
        ),
        charts.line_chart(
            "chart-depth",
            "Queue depth (peak per minute)",
            [charts.Line(JobState.QUEUED.value, [float(v) for v in rolled.depth], "s2")],
            unit=charts.count,
        ),
        charts.line_chart(
            "chart-wait",
            "Queue wait",
            [
                charts.Line("p50", rolled.wait_p50_s, "s1"),
                charts.Line("p95", rolled.wait_p95_s, "s2"),
            ],
            unit=charts.seconds,
        ),
        charts.line_chart(
            "chart-errors",
            "Error rate (of attempts ended)",
            [charts.Line("errors", rolled.error_rate, "s3")],
            unit=charts.percent,
        ),
    ]


@router.get("")
async def overview(ctx: Ctx, who: Operator, tenant: Name = "", provider: Name = "") -> HTMLResponse:
    return render(ctx, "overview.html", who, **await _overview(ctx, tenant, provider))


@router.get("/live/overview")
async def overview_live(
    ctx: Ctx, who: Operator, tenant: Name = "", provider: Name = ""
) -> HTMLResponse:
    return render(ctx, "overview_live.html", who, **await _overview(ctx, tenant, provider))


@router.post("/test_job")
async def test_job(request: Request, ctx: Ctx, who: Operator) -> Response:
    """The empty console's form: one job for the built-in simulator, then its page."""
    same_origin(request)
    values = await _form(request)
    tenant = values.get("tenant", "").strip()
    prompt = values.get("prompt", "").strip() or "hello"
    if not tenant or len(tenant) > MAX_NAME_CHARS:
        raise errors.InvalidRequest("choose a tenant", param="tenant")
    if len(prompt) > MAX_PROMPT_CHARS or "\x00" in prompt:
        raise errors.InvalidRequest(f"at most {MAX_PROMPT_CHARS} characters", param="prompt")
    job = await ctx.dashboard.submit_test_job(tenant_name=tenant, prompt=prompt, operator=who)
    return RedirectResponse(f"/dashboard/jobs/{job.id}", status_code=303)


# -- jobs --------------------------------------------------------------------------------


async def _search(ctx: AppContext, form: views.ConsoleFilter, after: str | None) -> dict[str, Any]:
    tenants = await ctx.dashboard.tenants()
    by_name = {t.name: t.id for t in tenants}
    ident = form.identifier()
    if ident is not None:
        rows = await ctx.dashboard.find(ident, limit=PAGE + 1)
    else:
        tenant_id = by_name.get(form.tenant, "") if form.tenant else None
        rows = await ctx.dashboard.search(
            form.job_filter(tenant_id, await ctx.dashboard.database_now()),
            after=after,
            limit=PAGE + 1,
        )
    query = form.query()
    return {
        "jobs": rows[:PAGE],
        "more": len(rows) > PAGE and ident is None,
        "names": {t.id: t.name for t in tenants},
        "tenants": sorted(by_name),
        "filter": form,
        "query": urllib.parse.urlencode(query),
        "after": after or "",
        "statuses": [s.value for s in JobState],
        "actions": [a.value for a in BulkAction],
        "since_choices": list(views.SINCE_S),
    }


@router.get("/jobs")
async def jobs(
    request: Request,
    ctx: Ctx,
    who: Operator,
    after: Annotated[str | None, Query(max_length=255, pattern=r"^[^\x00]*$")] = None,
) -> HTMLResponse:
    form = views.ConsoleFilter.read(request.query_params)
    return render(ctx, "jobs.html", who, **await _search(ctx, form, after))


@router.get("/live/jobs")
async def jobs_live(
    request: Request,
    ctx: Ctx,
    who: Operator,
    after: Annotated[str | None, Query(max_length=255, pattern=r"^[^\x00]*$")] = None,
) -> HTMLResponse:
    form = views.ConsoleFilter.read(request.query_params)
    return render(ctx, "jobs_rows.html", who, **await _search(ctx, form, after))


async def _job(ctx: AppContext, job_id: str) -> dict[str, Any]:
    detail = await ctx.dashboard.job(job_id)
    job, events = detail.job, detail.events
    show = ctx.settings.dashboard_show_content
    waiting = None if job.terminal else await ctx.waits.of_job(job)
    return {
        "job": job,
        "waiting": waiting,
        "waiting_until": None
        if waiting is None or waiting.until is None
        else from_unix(waiting.until),
        "tenant": detail.tenant_name or "?",
        "events": events,
        "attempts": views.attempts(events),
        "cost": views.job_cost(detail.usage, ctx.settings.prices()),
        "show_content": show,
        "request_shape": redaction.shape(job.request, show_content=show),
        "result_shape": redaction.shape(job.result, show_content=show),
    }


@router.get("/jobs/{job_id}")
async def job_detail(job_id: JobId, ctx: Ctx, who: Operator) -> HTMLResponse:
    values = await _job(ctx, job_id)
    deliveries = await ctx.dashboard.deliveries(job_id)
    return render(ctx, "job.html", who, deliveries=deliveries, **values)


@router.get("/live/jobs/{job_id}")
async def job_live(job_id: JobId, ctx: Ctx, who: Operator) -> HTMLResponse:
    """The job's summary, attempts and timeline, refreshed while it runs."""
    return render(ctx, "job_live.html", who, **await _job(ctx, job_id))


# -- bulk actions ------------------------------------------------------------------------


async def _bulk_target(
    ctx: AppContext, values: dict[str, str], counted_ms: int
) -> tuple[BulkAction, views.ConsoleFilter, JobFilter]:
    action = views.BULK_ACTIONS.get(values.get("action", ""))
    if action is None:
        raise errors.InvalidRequest("choose cancel, redrive or delete", param="action")
    form = views.ConsoleFilter.read(values)
    if form.identifier() is not None:
        raise errors.InvalidRequest(
            "bulk actions take a filter: search by key=value, not by id", param="q"
        )
    tenant_id = await ctx.dashboard.tenant_id(form.tenant) if form.tenant else None
    counted = from_unix(counted_ms / 1000)
    return action, form, _counted_before(form.job_filter(tenant_id, counted), counted_ms)


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise errors.InvalidRequest("form too large", param="form")
    try:
        parsed = urllib.parse.parse_qs(body.decode(), max_num_fields=16, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise errors.InvalidRequest("form is not valid", param="form") from None
    return {key: values[0] for key, values in parsed.items()}


def _counted_before(where: JobFilter, counted_ms: int) -> JobFilter:
    """The filter bounded to jobs created by the count (the millisecond it was taken
    included): a job submitted after the operator saw the count is never acted on."""
    bound = from_unix(counted_ms / 1000) + timedelta(milliseconds=1)
    if where.created_before is not None and where.created_before < bound:
        return where
    return dataclasses.replace(where, created_before=bound)


def _read_counted_ms(values: dict[str, str]) -> int:
    """The moment of the count the form confirms (Unix milliseconds): one a time can hold,
    its millisecond included (before the year 9999 ends), or a 400."""
    raw = values.get("counted_ms", "")
    if not raw.isdigit() or len(raw) > 15 or int(raw) >= ranges.RUN_AT_MAX * 1000:
        raise errors.InvalidRequest("confirm the count first", param="counted_ms")
    return int(raw)


@router.get("/bulk")
async def bulk_confirm(request: Request, ctx: Ctx, who: Operator) -> HTMLResponse:
    """The confirmation: how many jobs the action would change now, before anything does."""
    values = dict(request.query_params)
    # The database's clock: on PostgreSQL it stamps created_at, whatever this host's says.
    counted_ms = int((await ctx.dashboard.database_now()).timestamp() * 1000)
    action, form, where = await _bulk_target(ctx, values, counted_ms)
    matched = await ctx.dashboard.bulk_count(operator=who, action=action, where=where)
    return render(
        ctx,
        "bulk_confirm.html",
        who,
        action=action.value,
        filter=form,
        matched=matched,
        counted_ms=counted_ms,
        query=urllib.parse.urlencode(form.query()),
    )


@router.post("/bulk")
async def bulk_apply(request: Request, ctx: Ctx, who: Operator) -> HTMLResponse:
    same_origin(request)
    values = await _form(request)
    counted_ms = _read_counted_ms(values)
    action, form, where = await _bulk_target(ctx, values, counted_ms)
    after = values.get("after") or None
    if after is not None and len(after) > 255:
        raise errors.InvalidRequest("after is too long", param="after")
    outcome = await ctx.dashboard.bulk_apply(operator=who, action=action, where=where, after=after)
    return render(
        ctx,
        "bulk_done.html",
        who,
        action=action.value,
        filter=form,
        outcome=outcome,
        counted_ms=counted_ms,
        query=urllib.parse.urlencode(form.query()),
    )
