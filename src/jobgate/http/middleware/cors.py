"""Cross-origin reads for browsers holding a job token (JOBGATE_CORS_ORIGINS): the routes a job
token reaches answer the configured origins' preflights and carry Access-Control-Allow-Origin;
no other route is opened to another origin, since a tenant's API key never belongs in a
browser. Credentials travel as a Bearer header or `?token=`, never as cookies, so
Access-Control-Allow-Credentials is never sent."""

from __future__ import annotations

import re

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobgate.http import problems

# The job-token routes and the method each takes: /v1/jobs/{id}, /stream, /events (GET) and
# /cancel (POST).
_TOKEN_ROUTE = re.compile(r"/v1/jobs/[A-Za-z0-9_-]{1,255}(/stream|/events|/cancel)?")
_ALLOWED_HEADERS = "Authorization, Content-Type, Last-Event-ID"
_EXPOSED_HEADERS = "Retry-After, X-Request-Id"
_MAX_AGE_S = "600"


def route_method(path: str) -> str | None:
    """The method a job token may use on `path`; None for a path no token reaches."""
    match = _TOKEN_ROUTE.fullmatch(path)
    if match is None:
        return None
    return "POST" if match.group(1) == "/cancel" else "GET"


class CorsMiddleware:
    """Answers preflights of the job-token routes and marks their answers for `origins`
    (exact `scheme://host[:port]` strings, or `*` for any origin)."""

    def __init__(self, app: ASGIApp, *, origins: tuple[str, ...]) -> None:
        self.app = app
        self.any_origin = "*" in origins
        self.origins = frozenset(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = None if scope["type"] != "http" else route_method(scope["path"])
        origin = None if method is None else Headers(scope=scope).get("origin")
        if method is None or origin is None:
            await self.app(scope, receive, send)
            return
        allowed = self.any_origin or origin in self.origins
        requested = Headers(scope=scope).get("access-control-request-method")
        if scope["method"] == "OPTIONS" and requested is not None:
            await self._preflight(scope, receive, send, origin, allowed and requested == method)
            return
        if not allowed:  # answered as usual: the browser keeps it from the page
            await self.app(scope, receive, send)
            return

        async def send_marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Access-Control-Allow-Origin"] = self._allow(origin)
                headers["Access-Control-Expose-Headers"] = _EXPOSED_HEADERS
                headers.add_vary_header("Origin")
            await send(message)

        await self.app(scope, receive, send_marked)

    async def _preflight(
        self, scope: Scope, receive: Receive, send: Send, origin: str, allowed: bool
    ) -> None:
        if not allowed:
            refused = problems.problem(
                403,
                code="cors_refused",
                title="Forbidden",
                detail="this origin or method may not call this route (JOBGATE_CORS_ORIGINS)",
                error_type="permission_error",
                headers={"Vary": "Origin"},
            )
            await refused(scope, receive, send)
            return
        method = route_method(scope["path"]) or "GET"
        headers = [
            (b"access-control-allow-origin", self._allow(origin).encode("latin-1")),
            (b"access-control-allow-methods", method.encode("latin-1")),
            (b"access-control-allow-headers", _ALLOWED_HEADERS.encode("latin-1")),
            (b"access-control-max-age", _MAX_AGE_S.encode("latin-1")),
            (b"vary", b"Origin"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    def _allow(self, origin: str) -> str:
        return "*" if self.any_origin else origin
