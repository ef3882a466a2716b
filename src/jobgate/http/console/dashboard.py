"""The operator dashboard: sign-in, sessions and the pages' frame, server-rendered over the
services (no build step); the console's pages are in console_routes.

Operators sign in with an operator key (`jobgate operators create NAME`, or the one `jobgate
serve` prints on first start). Signing in opens a server-side session (random id, expiry,
revocable); the HttpOnly, SameSite=Strict cookie holds only the session id, never the key, and
signing out deletes the session and the cookie. State-changing forms also check that the
request comes from this origin (scheme, host and port). Pages may not be framed.
"""

from __future__ import annotations

import json
import urllib.parse
from datetime import datetime
from typing import Annotated, Any

import jinja2
from fastapi import APIRouter, Depends, Query, Request
from starlette.datastructures import MutableHeaders
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobgate import errors
from jobgate.http.context import AppContext, Ctx, context
from jobgate.http.object_ids import JobId

router = APIRouter(prefix="/dashboard", include_in_schema=False)
root = APIRouter(include_in_schema=False)
COOKIE = "jobgate_session"  # was `jobgate_operator`, which held the key: no longer read
COOKIE_PATH = "/dashboard"
MAX_FORM_BYTES = 4096
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; "
    "frame-ancestors 'none'; form-action 'self'",
}
_DEFAULT_PORTS = {"http": 80, "https": 443}
_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("jobgate.http", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    undefined=jinja2.StrictUndefined,
)


@root.get("/")
async def home() -> Response:
    """The address `jobgate serve` prints leads a browser to the console (its sign-in page
    when signed out): the API itself lives under /v1, described at /docs."""
    return RedirectResponse("/dashboard", status_code=307)


class LoginRequired(Exception):
    """An unauthenticated browser: send it to the login page."""


def _age(moment: datetime | None, now: datetime) -> str:
    """How long ago, in the two largest units: `3m 12s`, `2h 5m`, `4d 1h`."""
    if moment is None:
        return "—"
    seconds = max(0, int((now - moment).total_seconds()))
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def _time(moment: datetime | None) -> str:
    return "—" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def _count(value: int, exact: bool = True) -> str:
    """A count as read: `10000+` when it is a floor (the walk stopped at its bound)."""
    return str(value) if exact else f"{value}+"


_templates.filters["time"] = _time
_templates.filters["count"] = _count
_templates.filters["pretty"] = _pretty


def render(ctx: AppContext, template: str, operator: str, **values: Any) -> HTMLResponse:
    now = ctx.jobs.clock.now()
    page = _templates.get_template(template).render(
        operator=operator, now=now, age=lambda m: _age(m, now), **values
    )
    return HTMLResponse(page)


class SecurityHeadersMiddleware:
    """Every dashboard answer (pages, redirects, refusals) may not be framed or sniffed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(COOKIE_PATH):
            await self.app(scope, receive, send)
            return

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_secured)


async def operator(request: Request) -> str:
    ctx = context(request)
    try:
        session_id = request.cookies.get(COOKIE)
        if session_id:
            return await ctx.operators.session_operator(session_id)
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and bearer.strip():
            return await ctx.operators.authenticate(bearer.strip())
    except errors.Unauthorized:
        pass
    raise LoginRequired


Operator = Annotated[str, Depends(operator)]


def _origin_of(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 0)
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port


def same_origin(request: Request) -> None:
    """Refuse a form posted from another origin: scheme, host and port must all match this
    server's (the Origin header, else the Referer; a browser sends one with every POST)."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if claimed is None:
        return
    if _origin_of(claimed) != _origin_of(str(request.base_url)):
        raise errors.Unauthorized("cross-origin form refused")


async def login_redirect(request: Request, _exc: Exception) -> Response:
    if request.method == "GET":
        return RedirectResponse("/dashboard/login", status_code=303)
    return HTMLResponse("sign in first", status_code=401)


@router.get("/login")
async def login_page(
    ctx: Ctx, error: Annotated[str | None, Query(max_length=8)] = None
) -> HTMLResponse:
    return HTMLResponse(_templates.get_template("login.html").render(error=error, operator=None))


async def _form_key(request: Request) -> str:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise errors.InvalidRequest("form too large", param="key")
    try:
        form = urllib.parse.parse_qs(body.decode(), max_num_fields=8, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise errors.InvalidRequest("form is not valid", param="key") from None
    return (form.get("key") or [""])[0].strip()


@router.post("/login")
async def login(request: Request, ctx: Ctx) -> Response:
    same_origin(request)
    try:
        session_id, _ = await ctx.operators.sign_in(
            await _form_key(request), ttl_s=ctx.settings.dashboard_session_ttl_s
        )
    except errors.Unauthorized:
        return RedirectResponse("/dashboard/login?error=1", status_code=303)
    response = RedirectResponse("/dashboard", status_code=303)
    response.set_cookie(
        COOKIE,
        session_id,
        max_age=int(ctx.settings.dashboard_session_ttl_s),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=COOKIE_PATH,
    )
    return response


@router.post("/logout")
async def logout(request: Request, ctx: Ctx) -> Response:
    same_origin(request)
    session_id = request.cookies.get(COOKIE)
    if session_id:
        await ctx.operators.sign_out(session_id)
    response = RedirectResponse("/dashboard/login", status_code=303)
    # The same Path and attributes as at sign-in, or the browser keeps the cookie.
    response.delete_cookie(
        COOKIE,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.get("/dlq")
async def dead_letters(ctx: Ctx, who: Operator) -> HTMLResponse:
    rows, names = await ctx.dashboard.dead_letters()
    return render(ctx, "dlq.html", who, jobs=rows, names=names)


@router.post("/jobs/{job_id}/redrive")
async def redrive(job_id: JobId, request: Request, ctx: Ctx, who: Operator) -> Response:
    same_origin(request)
    await ctx.dashboard.redrive(job_id=job_id, operator=who)
    return RedirectResponse(f"/dashboard/jobs/{job_id}", status_code=303)


@router.post("/jobs/{job_id}/cancel")
async def cancel(job_id: JobId, request: Request, ctx: Ctx, who: Operator) -> Response:
    same_origin(request)
    await ctx.dashboard.cancel(job_id=job_id, operator=who)
    return RedirectResponse(f"/dashboard/jobs/{job_id}", status_code=303)


@router.get("/webhooks")
async def webhooks(ctx: Ctx, who: Operator) -> HTMLResponse:
    return render(ctx, "webhooks.html", who, endpoints=await ctx.dashboard.endpoint_health())
