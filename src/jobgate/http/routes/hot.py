"""The hottest routes' requests sent straight to their handlers: `POST /v1/jobs`,
`GET /v1/jobs/{id}`, `POST /v1/responses` and `GET /v1/responses/{id}` (what a client of
OpenAI's SDK sends for a background response and polls while it runs).

FastAPI's routing and request wrapping cost more CPU than the work of a submit or a status
read. This middleware sits innermost among jobgate's own (so the request id, access log and
body limit still wrap it) and calls the route's one handler (http.routes.asgi: the same the
router would run for the declared route) for exactly those method and path shapes; anything
else goes on to FastAPI's router.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from jobgate.http.routes import jobs, responses
from jobgate.http.routes.asgi import Answerer

JOBS_PATH = "/v1/jobs"
RESPONSES_PATH = "/v1/responses"
_READS = (
    (JOBS_PATH + "/", "job_id", jobs.answer_read),
    (RESPONSES_PATH + "/", "response_id", responses.answer_retrieve),
)


class HotRoutesMiddleware:
    """Sends the hot routes' requests to their handlers; everything else goes to `app`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            answerer = handler_of(scope)
            if answerer is not None:
                response = await answerer(scope, receive)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def handler_of(scope: Scope) -> Answerer | None:
    """The handler of a hot route's request (its path parameter set in the scope, as the
    router sets it), None for any other request (or one under a root path: the router
    matches those)."""
    if scope.get("root_path"):
        return None
    path: str = scope["path"]
    method: str = scope["method"]
    if method == "POST":
        if path == JOBS_PATH:
            return jobs.answer_submit
        if path == RESPONSES_PATH:
            return responses.answer_create
        return None
    if method != "GET":
        return None
    for prefix, name, answerer in _READS:
        if path.startswith(prefix):
            object_id = path[len(prefix) :]
            if not object_id or "/" in object_id:
                return None
            scope["path_params"] = {name: object_id}
            return answerer
    return None
