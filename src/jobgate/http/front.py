"""What uvicorn serves: the FastAPI app, with the hot routes' requests sent past its outer
layers.

http.routes.hot sends `POST /v1/jobs`, `POST /v1/responses` and the status reads
`GET /v1/jobs/{id}` and `GET /v1/responses/{id}` to their handlers inside jobgate's own
middleware (request id, security headers, access log, body limit), but every request first
went through FastAPI's and Starlette's outer layers: the native telemetry check (three
OpenTelemetry provider lookups, each reading os.environ), the server-error and
exception-telemetry layers and FastAPI's own body limit, a visible share of the API's CPU per
status read. For those method and path shapes this front calls jobgate's outermost middleware
directly, as Starlette would (with `scope["app"]` set): a request of such a shape that is no
hot route goes on to FastAPI's router, and an unexpected error is answered by the request-id
layer with the same problem as the server-error layer's handler (problems.unexpected). While
a tracer provider is set every request takes the full stack, so FastAPI's HTTP spans are kept
(its OpenTelemetry metrics and logs without a tracer provider do not see these routes).

A status read without a body (no Content-Length, no Transfer-Encoding: what every client
sends) is answered here in one step when jobgate's layers are the request id, the security
headers and the body limit only (no access log): those would do nothing to it but add the
request id, so the answer gets its id here, without four coroutine layers and three send
wrappers on every read. The security headers are for
/dashboard paths only and a body limit has nothing to count."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from jobgate import tracing
from jobgate.http import problems
from jobgate.http.console.dashboard import SecurityHeadersMiddleware
from jobgate.http.middleware import request_id
from jobgate.http.middleware.body_limit import BodyLimitMiddleware
from jobgate.http.middleware.request_id import RequestIdMiddleware
from jobgate.http.routes import hot
from jobgate.http.routes.asgi import Answerer
from jobgate.http.routes.hot import JOBS_PATH, RESPONSES_PATH, HotRoutesMiddleware

_READ_PREFIXES = (JOBS_PATH + "/", RESPONSES_PATH + "/")
_REQUEST_ID = request_id.HEADER.lower().encode("latin-1")
# Layers between the request id and the hot routes that leave a bodiless status read alone.
_INERT_FOR_READS = (SecurityHeadersMiddleware, BodyLimitMiddleware)


class HotFront:
    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._ours: ASGIApp | None = None  # jobgate's outermost middleware, once found
        self._direct_reads = False  # status reads answered here (see the module's doc)
        self._searched = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _hot_shaped(scope) and not tracing.recording():
            ours = self._ours if self._searched else self._find_ours()
            if ours is not None:
                scope["app"] = self.app
                if self._direct_reads and scope["method"] == "GET" and _bodiless(scope):
                    answerer = hot.handler_of(scope)
                    if answerer is not None:
                        await _read(scope, receive, send, answerer)
                        return
                await ours(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _find_ours(self) -> ASGIApp | None:
        """The request-id middleware in the app's built stack (None: not there, so every
        request keeps the full stack), and whether the layers under it leave status reads
        alone."""
        app = self.app
        if app.middleware_stack is None:  # built on the first request, as Starlette does
            app.middleware_stack = app.build_middleware_stack()
        layer: object = app.middleware_stack
        while layer is not None and not isinstance(layer, RequestIdMiddleware):
            layer = getattr(layer, "app", None)
        below = getattr(layer, "app", None)
        while isinstance(below, _INERT_FOR_READS):
            below = below.app
        self._direct_reads = isinstance(below, HotRoutesMiddleware)
        self._ours, self._searched = layer, True
        return layer


async def _read(scope: Scope, receive: Receive, send: Send, answerer: Answerer) -> None:
    """A status read as RequestIdMiddleware -> HotRoutesMiddleware would answer it: an error
    before the answer starts is answered with problems.unexpected, one after it is logged
    (a Starlette response's first step is its start)."""
    rid = request_id.new_id()
    scope.setdefault("state", {})["request_id"] = rid
    try:
        response = await answerer(scope, receive)
    except Exception as exc:
        await problems.unexpected(scope, exc)(scope, receive, send)
        return
    response.raw_headers.append((_REQUEST_ID, rid.encode("latin-1")))
    try:
        await response(scope, receive, send)
    except Exception as exc:  # never re-raised: the server would log the raw message again
        request_id.log_unhandled(scope, exc)


def _hot_shaped(scope: Scope) -> bool:
    path: str = scope["path"]
    if scope["method"] == "POST":
        return path == JOBS_PATH or path == RESPONSES_PATH
    if scope["method"] != "GET":
        return False
    for prefix in _READ_PREFIXES:
        if path.startswith(prefix):
            return "/" not in path[len(prefix) :]
    return False


def _bodiless(scope: Scope) -> bool:
    """No body framing in the head (a GET's usual form); a `Content-Length: 0` counts as
    framing, so such a request takes the layers and is answered by them."""
    for name, _ in scope["headers"]:
        if name == b"content-length" or name == b"transfer-encoding":
            return False
    return True
