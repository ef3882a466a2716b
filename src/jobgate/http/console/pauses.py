"""The console's pauses page: every pause with a Resume button, and a form that pauses the
claims of a provider, model and/or tenant (services/pauses.py, as POST /v1/pauses does)."""

from __future__ import annotations

import urllib.parse

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from jobgate import errors
from jobgate.http.console.dashboard import Operator, render, same_origin
from jobgate.http.context import AppContext, Ctx
from jobgate.http.object_ids import PauseId
from jobgate.services import pauses

router = APIRouter(prefix="/dashboard", include_in_schema=False)
MAX_FORM_BYTES = 4096


async def _page(ctx: AppContext, who: str, *, error: str | None = None) -> HTMLResponse:
    service = ctx.pauses
    found = await service.all()
    names = await service.tenant_names(found)
    tenants = await ctx.dashboard.tenants()
    providers = ctx.jobs.providers.names()
    return render(
        ctx,
        "pauses.html",
        who,
        pauses=found,
        names=names,
        tenants=tenants,
        providers=providers,
        error=error,
    )


@router.get("/pauses")
async def pauses_page(ctx: Ctx, who: Operator) -> HTMLResponse:
    return await _page(ctx, who)


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise errors.InvalidRequest("form too large", param="form")
    try:
        parsed = urllib.parse.parse_qs(body.decode(), max_num_fields=8, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise errors.InvalidRequest("form is not valid", param="form") from None
    return {key: values[0].strip() for key, values in parsed.items()}


@router.post("/pauses")
async def pause(request: Request, ctx: Ctx, who: Operator) -> Response:
    """Pause the scope the form names (an empty field matches anything)."""
    same_origin(request)
    values = await _form(request)
    scope = pauses.Scope(
        provider=values.get("provider") or None,
        model=values.get("model") or None,
        tenant=values.get("tenant") or None,
    )
    try:
        await ctx.pauses.pause(scope, reason=values.get("reason") or None, operator=who)
    except errors.InvalidRequest as exc:  # shown on the page, nothing stored
        page = await _page(ctx, who, error=exc.message)
        page.status_code = 400
        return page
    return RedirectResponse("/dashboard/pauses", status_code=303)


@router.post("/pauses/{pause_id}/resume")
async def resume(pause_id: PauseId, request: Request, ctx: Ctx, who: Operator) -> Response:
    same_origin(request)
    await ctx.pauses.resume(pause_id, operator=who)
    return RedirectResponse("/dashboard/pauses", status_code=303)
