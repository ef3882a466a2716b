"""Routes served by one plain handler each, declared to FastAPI for `/openapi.json` only.

A route's handler here reads its request itself (headers, body, query) and answers every case,
as FastAPI would answer the declared route: the same strict parse and content-type check
before the caller is known (http.strict_json), then authentication, then the parameters in
FastAPI's order (path, query, header, body), each refused with FastAPI's validation wording
(problems.invalid_request_of). Its FastAPI declaration (`@served_by(handler)` on a route of a
router whose `route_class` is `DeclaredRoute`) keeps the models, parameters and answers in the
OpenAPI document, and the router's match of it runs the same handler: there is no second
implementation to keep equal. http.routes.hot also dispatches to these handlers without
FastAPI's routing, for speed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qsl

import pydantic
from fastapi import Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive, Scope

from jobgate import errors
from jobgate.domain import ranges
from jobgate.http import problems, strict_json
from jobgate.http.context import AppContext, tenant_of
from jobgate.storage.records import Tenant

# A route's one handler: the answer to its request (the caller sends it).
Answerer = Callable[[Scope, Receive], Awaitable[Response]]
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])
_Value = TypeVar("_Value")
_Model = TypeVar("_Model", bound=pydantic.BaseModel)
_SERVED: dict[Callable[..., Any], Answerer] = {}
_ID = re.compile(ranges.ID_PATTERN)  # what every id type of http.object_ids takes


def served_by(answerer: Answerer) -> Callable[[_Endpoint], _Endpoint]:
    """Mark a FastAPI endpoint as a declaration: `answerer` serves its route."""

    def mark(endpoint: _Endpoint) -> _Endpoint:
        _SERVED[endpoint] = answerer
        return endpoint

    return mark


class DeclaredRoute(strict_json.StrictJsonRoute):
    """A route whose endpoint is `served_by` a handler: FastAPI declares it (OpenAPI) and the
    handler answers it; any other endpoint is an ordinary StrictJsonRoute."""

    def get_route_handler(self) -> strict_json.Handler:
        answerer = _SERVED.get(self.endpoint)
        if answerer is None:
            return super().get_route_handler()

        async def handler(request: Request) -> Response:
            return await answerer(request.scope, request.receive)

        return handler


def context(scope: Scope) -> AppContext:
    ctx: AppContext = scope["app"].state.ctx
    return ctx


def headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name, the first of repeats winning (as Starlette's
    `Headers.get`, which FastAPI's `Header()` parameters read)."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        found.setdefault(name, value)
    return found


def text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def query(scope: Scope) -> dict[str, str]:
    """The query's parameters, the last of repeats winning (as FastAPI's `Query()`)."""
    raw: bytes = scope.get("query_string", b"")
    if not raw:
        return {}
    return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True))


def path_param(scope: Scope, name: str, prefix: str) -> str:
    """A path parameter: the router's match, or (dispatched by http.routes.hot) the rest of
    the path after `prefix`."""
    params: dict[str, Any] | None = scope.get("path_params")
    if params and name in params:
        return str(params[name])
    path: str = scope["path"]
    return path[len(prefix) :]


def checked(adapter: pydantic.TypeAdapter[_Value], value: object, at: tuple[str, ...]) -> _Value:
    """`value` as FastAPI validates a parameter at `at` (`("query", "wait")`) with `adapter`;
    errors.InvalidRequest in FastAPI's words otherwise."""
    try:
        return adapter.validate_python(value)
    except pydantic.ValidationError as exc:
        raise problems.invalid_request_of(exc, at) from None


def object_id(adapter: pydantic.TypeAdapter[str], value: str, name: str) -> str:
    """A path's object id `name` as its declaration (http.object_ids) takes it."""
    if _ID.fullmatch(value) is None:  # a minted id passes without the adapter
        checked(adapter, value, ("path", name))
    return value


async def read_body(receive: Receive) -> bytes:
    """The whole request body (Starlette's `Request.body`, without the Request)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def parse_json(found: dict[bytes, bytes], body: bytes) -> Any:
    """The strict parse of a JSON body (None for no body), before the caller is known: a body
    of another content type, or not JSON jobgate can keep, is refused first."""
    strict_json.require_type(text(found.get(b"content-type")) or "", body)
    return strict_json.parse(body) if body else None


@dataclasses.dataclass(frozen=True, slots=True)
class JsonPost(Generic[_Value]):
    """A JSON POST read, parsed and checked: its caller, headers, body as sent and payload
    (its model, or what the route's check makes of the body)."""

    ctx: AppContext
    tenant: Tenant
    headers: dict[bytes, bytes]
    raw: Any
    payload: _Value

    def header(self, name: bytes) -> str | None:
        return text(self.headers.get(name))


# A route's check of its body: (headers, body as sent, its strict parse) -> what it takes.
BodyCheck = Callable[[dict[bytes, bytes], bytes, Any], _Value]


async def json_post(scope: Scope, receive: Receive, model: type[_Model]) -> JsonPost[_Model]:
    """A JSON POST as FastAPI takes a route's `model` body (see json_post_checked)."""
    return await json_post_checked(
        scope, receive, lambda found, body, raw: body_of(model, found, body, raw)
    )


async def json_post_checked(
    scope: Scope, receive: Receive, check: BodyCheck[_Value]
) -> JsonPost[_Value]:
    """A JSON POST as FastAPI takes a route's body: the strict parse before the caller is
    known (a refusal wins over a bad key), then the caller (a bad key wins over a body the
    check refuses), then `check`; a JobgateError for any refusal."""
    found = headers(scope)
    body = await read_body(receive)
    raw = parse_json(found, body)
    ctx = context(scope)
    tenant = await tenant_of(ctx, text(found.get(b"authorization")) or "")
    return JsonPost(ctx, tenant, found, raw, check(found, body, raw))


def body_value(found: dict[bytes, bytes], body: bytes, raw: Any) -> Any:
    """What FastAPI validates of a request body `parse_json` read as `raw`: required, read as
    JSON only when its content type says so (the bytes otherwise, which no model takes)."""
    if not body:
        raise errors.InvalidRequest("Field required")
    return raw if _read_as_json(found.get(b"content-type")) else body


def body_of(model: type[_Model], found: dict[bytes, bytes], body: bytes, raw: Any) -> _Model:
    """`model` of a request body `parse_json` read as `raw` (body_value), validated as
    FastAPI validates a route's body."""
    value = body_value(found, body, raw)
    try:
        if isinstance(value, dict):
            return model.model_validate(value)
        # FastAPI's validation reads attributes too: only the refusal's wording differs.
        return model.model_validate(value, from_attributes=True)
    except pydantic.ValidationError as exc:
        raise problems.invalid_request_of(exc) from None


def _read_as_json(content_type: bytes | None) -> bool:
    """Whether FastAPI reads a body of this content type as JSON: `application/json` or
    `application/*+json`, with any parameters (none at all: not JSON)."""
    if content_type == b"application/json":  # what every client sends
        return True
    if not content_type:
        return False
    media_type = content_type.split(b";", 1)[0].strip().lower()
    kind, _, subtype = media_type.partition(b"/")
    return kind == b"application" and (subtype == b"json" or subtype.endswith(b"+json"))
