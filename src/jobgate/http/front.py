"""What uvicorn serves: the FastAPI app, with the hot routes' requests sent past its outermost
layers.

http.hot_routes answers `POST /v1/jobs` and `GET /v1/jobs/{id}` inside jobgate's own middleware
(request id, security headers, access log, body limit), but every request first went through
FastAPI's and Starlette's outer layers: the native telemetry check (three OpenTelemetry
provider lookups, each reading os.environ), the server-error and exception-telemetry layers and
FastAPI's own body limit, about 7 % of the API's CPU per status read (bench/notes.md). For those
two method and path shapes this front calls jobgate's outermost middleware directly, as
Starlette would (with `scope["app"]` set), so they are answered exactly as before: the hot path
still hands anything unusual to FastAPI's router, and an unexpected error is answered by the
request-id layer with the same problem as the server-error layer's handler
(problems.unexpected). While a tracer provider is set every request takes the full stack, so
FastAPI's HTTP spans are kept (its OpenTelemetry metrics and logs without a tracer provider
do not see these two routes)."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from jobgate import tracing
from jobgate.http.hot_routes import JOBS_PATH
from jobgate.http.request_id import RequestIdMiddleware

_JOB_PREFIX = JOBS_PATH + "/"


class HotFront:
    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._ours: ASGIApp | None = None  # jobgate's outermost middleware, once found
        self._searched = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _hot_shaped(scope) and not tracing.recording():
            ours = self._ours if self._searched else self._find_ours()
            if ours is not None:
                scope["app"] = self.app
                await ours(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _find_ours(self) -> ASGIApp | None:
        """The request-id middleware in the app's built stack (None: not there, so every
        request keeps the full stack)."""
        app = self.app
        if app.middleware_stack is None:  # built on the first request, as Starlette does
            app.middleware_stack = app.build_middleware_stack()
        layer: object = app.middleware_stack
        while layer is not None and not isinstance(layer, RequestIdMiddleware):
            layer = getattr(layer, "app", None)
        self._ours, self._searched = layer, True
        return layer


def _hot_shaped(scope: Scope) -> bool:
    path: str = scope["path"]
    if scope["method"] == "POST":
        return path == JOBS_PATH
    return (
        scope["method"] == "GET"
        and path.startswith(_JOB_PREFIX)
        and "/" not in path[len(_JOB_PREFIX) :]
    )
