"""The hottest routes, `POST /v1/jobs`, `GET /v1/jobs/{id}`, `POST /v1/responses` and
`GET /v1/responses/{id}` (what a client of OpenAI's SDK sends for a background response and
polls while it runs), without FastAPI's layers.

FastAPI's routing, dependency solving and request wrapping cost more CPU than the work of a
submit or a status read. This middleware sits innermost among jobgate's own
(so the request id, access log and body limit still wrap it) and answers exactly those
method + path pairs in their ordinary form: one strict parse (http.strict_json), the same
model check, authentication, handler (`jobs_routes.submit`, `jobs_routes.read`,
`responses_routes.create`, `responses_routes.retrieve`) and problem table (`problems.answer`)
as the FastAPI route. Anything unusual is handed to FastAPI untouched, with the body it
already read replayed: a body that is not a JSON object or fails the model, another content
type, an id or `wait` the route would refuse, any other query (a job token's `?token=`), a job
read with a job token (`Bearer jgt_…`), a response read with a `Last-Event-ID` header (the
route checks its form even without `stream`). FastAPI then answers it exactly as before,
including which error wins, so the hot path never has to copy the framework's error
ordering. The FastAPI routes stay declared, so `/openapi.json` is unchanged
(tests/http/test_hot_routes.py holds the two paths equal).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pydantic
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobgate import errors
from jobgate.domain import ranges
from jobgate.http import job_access, jobs_routes, problems, responses_routes, strict_json
from jobgate.http.context import AppContext, tenant_of
from jobgate.http.models import SubmitJobRequest
from jobgate.http.responses_models import CreateResponseRequest
from jobgate.storage.records import Tenant

JOBS_PATH = "/v1/jobs"
RESPONSES_PATH = "/v1/responses"
_JOB_PREFIX = JOBS_PATH + "/"
_RESPONSE_PREFIX = RESPONSES_PATH + "/"
_OBJECT_ID = re.compile(ranges.ID_PATTERN)
# `?wait=N` in its plain form (at most two integer digits, optional decimals); anything else
# (another parameter, a repeat, a sign, an exponent) goes to FastAPI's own query parsing.
_WAIT_QUERY = re.compile(rb"wait=(\d{1,2}(?:\.\d{1,9})?)")
_Model = TypeVar("_Model", bound=pydantic.BaseModel)
_ELSEWHERE = object()  # "not for the hot path": a sentinel distinct from every wait value


class HotRoutesMiddleware:
    """Answers the hot routes directly; everything else goes to `app` (FastAPI's stack)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            path: str = scope["path"]
            method: str = scope["method"]
            if method == "POST" and path == JOBS_PATH:
                await self._submit(scope, receive, send)
                return
            if method == "POST" and path == RESPONSES_PATH:
                await self._create_response(scope, receive, send)
                return
            if method == "GET":
                target = read_target(scope)
                if target is not None:
                    response = await read_answer(scope, receive, *target)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _json_post(
        self, scope: Scope, receive: Receive, send: Send, model: type[_Model]
    ) -> tuple[dict[bytes, bytes], dict[str, Any], _Model] | None:
        """The headers, parsed body and `model` of a JSON POST the hot path answers; None
        when it was answered here (a body the strict parse refuses) or handed to FastAPI."""
        headers = _headers(scope)
        body = await _read_body(receive)
        if not body or not _is_plain_json(headers.get(b"content-type")):
            await self.app(scope, _replay(body, receive), send)
            return None
        try:
            raw = strict_json.parse(body)
        except errors.JobgateError as exc:
            await problems.answer(exc)(scope, receive, send)
            return None
        payload = _checked(raw, model)
        if payload is None:  # FastAPI words the validation error (after authenticating)
            await self.app(scope, _replay(body, receive), send)
            return None
        assert isinstance(raw, dict)
        return headers, raw, payload

    async def _submit(self, scope: Scope, receive: Receive, send: Send) -> None:
        posted = await self._json_post(scope, receive, send, SubmitJobRequest)
        if posted is None:
            return
        headers, raw, payload = posted
        ctx = _context(scope)
        request = Request(scope, receive)
        try:
            tenant = await tenant_of(ctx, _text(headers.get(b"authorization")) or "")
            response = await jobs_routes.submit(
                request,
                ctx,
                tenant,
                payload,
                raw,
                _text(headers.get(b"idempotency-key")),
                _text(headers.get(b"prefer")),
                json_checked=True,  # strict_json.parse above checked the JSON limits
            )
        except errors.JobgateError as exc:
            response = problems.answer(exc)
        await response(scope, receive, send)

    async def _create_response(self, scope: Scope, receive: Receive, send: Send) -> None:
        posted = await self._json_post(scope, receive, send, CreateResponseRequest)
        if posted is None:
            return
        headers, raw, _ = posted
        ctx = _context(scope)
        try:
            tenant = await tenant_of(ctx, _text(headers.get(b"authorization")) or "")
            response = await responses_routes.create(
                Request(scope, receive),
                responses_routes.service(ctx),
                tenant,
                raw,
                _text(headers.get(b"idempotency-key")),
            )
        except errors.JobgateError as exc:
            response = problems.answer(exc, openai=True)
        await response(scope, receive, send)


# A read's handler once the id and the caller are checked: (request, ctx, tenant, id, wait).
Reader = Callable[[Request, AppContext, Tenant, str, float | None], Awaitable[Response]]
ReadTarget = tuple[Reader, str, float | None]


def read_target(scope: Scope) -> ReadTarget | None:
    """The handler, object id and `wait` of a `GET /v1/jobs/{id}` or `GET /v1/responses/{id}`
    in the ordinary form the hot path answers; None for anything FastAPI must see (checked
    after the method)."""
    path: str = scope["path"]
    if scope.get("root_path"):
        return None
    reader: Reader
    if path.startswith(_JOB_PREFIX):
        if _bears_job_token(scope):
            return None  # the route's own dependency checks a job token
        reader, object_id = jobs_routes.read, path[len(_JOB_PREFIX) :]
    elif path.startswith(_RESPONSE_PREFIX) and not _has_header(scope, b"last-event-id"):
        reader, object_id = responses_routes.retrieve, path[len(_RESPONSE_PREFIX) :]
    else:
        return None
    wait = _wait_of(scope.get("query_string", b""))
    if wait is _ELSEWHERE or not _OBJECT_ID.fullmatch(object_id):
        return None
    assert wait is None or isinstance(wait, float)
    return reader, object_id, wait


async def read_answer(
    scope: Scope, receive: Receive, reader: Reader, object_id: str, wait: float | None
) -> Response:
    """The answer to a status read `read_target` accepted (a problem for a JobgateError);
    shared with http.front's direct path."""
    headers = _headers(scope)
    ctx = _context(scope)
    try:
        tenant = await tenant_of(ctx, _text(headers.get(b"authorization")) or "")
        return await reader(Request(scope, receive), ctx, tenant, object_id, wait)
    except errors.JobgateError as exc:
        return problems.answer(exc, openai=problems.openai_surface(scope["path"]))


def _context(scope: Scope) -> AppContext:
    ctx: AppContext = scope["app"].state.ctx
    return ctx


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name, the first of repeats winning (as Starlette's
    `Headers.get`, which FastAPI's `Header()` parameters read)."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        found.setdefault(name, value)
    return found


def _bears_job_token(scope: Scope) -> bool:
    """Whether the (first) `Authorization` header carries a job token."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            return job_access.is_job_token(value.decode("latin-1"))
    return False


def _has_header(scope: Scope, name: bytes) -> bool:
    return any(header == name for header, _ in scope["headers"])


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def _is_plain_json(content_type: bytes | None) -> bool:
    """`application/json`, with or without parameters: both the strict parse and FastAPI read
    such a body as JSON. Other types, and none (FastAPI's strict content type refuses it),
    take FastAPI's path."""
    if content_type is None:
        return False
    return content_type.split(b";", 1)[0].strip().lower() == b"application/json"


def _checked(raw: object, model: type[_Model]) -> _Model | None:
    """`model` of a parsed body, or None when it does not pass the model."""
    if not isinstance(raw, dict):
        return None
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError:
        return None


def _wait_of(query: bytes) -> float | object | None:
    """`?wait=` as the route reads it: None without a query, the seconds for a plain one in
    range, `_ELSEWHERE` for any other query (FastAPI parses and checks it)."""
    if not query:
        return None
    match = _WAIT_QUERY.fullmatch(query)
    if match is None:
        return _ELSEWHERE
    seconds = float(match.group(1))
    return seconds if seconds <= ranges.MAX_WAIT_S else _ELSEWHERE


async def _read_body(receive: Receive) -> bytes:
    """The whole request body (Starlette's `Request.body`, without the Request)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the already-read body over once, then the connection's own."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
