"""RFC 9457 problem+json answers, with an OpenAI-shaped `error` member, from one table."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pydantic
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import Scope

from jobgate import errors
from jobgate.http.middleware import request_id

log = logging.getLogger(__name__)
MEDIA_TYPE = "application/problem+json"

# error class -> (status, title, OpenAI error type). The most specific class wins.
TABLE: list[tuple[type[errors.JobgateError], int, str, str]] = [
    (errors.PayloadTooLarge, 413, "Payload too large", "invalid_request_error"),
    (errors.WebhookUrlRefused, 422, "Webhook URL refused", "invalid_request_error"),
    (errors.UnknownProvider, 400, "Unknown provider", "invalid_request_error"),
    (errors.InvalidRequest, 400, "Invalid request", "invalid_request_error"),
    (errors.Unauthorized, 401, "Unauthorized", "authentication_error"),
    (errors.Forbidden, 403, "Forbidden", "permission_error"),
    (errors.NotFound, 404, "Not found", "not_found_error"),
    (errors.IdempotencyKeyReused, 422, "Idempotency key reused", "invalid_request_error"),
    (errors.IdempotencyInProgress, 409, "Request in progress", "invalid_request_error"),
    (errors.Conflict, 409, "Conflict", "invalid_request_error"),
    (errors.QueueFull, 429, "Too many requests", "rate_limit_error"),
    (errors.TooManyStreams, 429, "Too many requests", "rate_limit_error"),
    (errors.LimitExceeded, 403, "Limit exceeded", "permission_error"),
    (errors.StorageUnavailable, 503, "Service unavailable", "server_error"),
]


# The routes OpenAI itself defines: there a bad key and a missing object are answered as
# OpenAI answers them (an `invalid_request_error`; `invalid_api_key`, or a null code), so a
# client reading `error.type` and `error.code` sees what it would from OpenAI. The native API
# keeps its own types.
OPENAI_PREFIXES = ("/v1/responses", "/v1/files", "/v1/batches", "/v1/conversations")
_SAME = object()  # `error.code` as the problem's `code`


def openai_surface(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in OPENAI_PREFIXES)


def problem(
    status: int,
    *,
    code: str,
    title: str,
    detail: str,
    error_type: str,
    param: str | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    error_code: Any = _SAME,
) -> Response:
    """The problem answer; `error_code` (default: `code`) is the OpenAI-shaped `error.code`."""
    body = problem_body(
        status, code=code, title=title, detail=detail, error_type=error_type, param=param
    )
    if error_code is not _SAME:
        body["error"]["code"] = error_code
    if extra:
        body.update(extra)
    return Response(orjson.dumps(body), status_code=status, media_type=MEDIA_TYPE, headers=headers)


def problem_body(
    status: int, *, code: str, title: str, detail: str, error_type: str, param: str | None = None
) -> dict[str, Any]:
    """An RFC 9457 problem with OpenAI's `error` member: every error answer's body, those the
    HTTP protocol writes itself too (http.middleware.edge_limits)."""
    return {
        "type": f"/problems/{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        "error": {"message": detail, "type": error_type, "code": code, "param": param},
    }


def _classify(exc: errors.JobgateError) -> tuple[int, str, str]:
    for cls, status, title, error_type in TABLE:
        if isinstance(exc, cls):
            return status, title, error_type
    return 500, "Internal error", "server_error"


def from_error(exc: errors.JobgateError, *, openai: bool = False) -> Response:
    """The answer to `exc`; `openai`: on a route of the OpenAI-compatible surface."""
    status, title, error_type = _classify(exc)
    error_code: Any = _SAME
    if openai and isinstance(exc, errors.Unauthorized | errors.NotFound):
        error_type = "invalid_request_error"
        error_code = exc.code if isinstance(exc, errors.Unauthorized) else None
    headers: dict[str, str] = {}
    extra: dict[str, Any] = {}
    retry_after = getattr(exc, "retry_after_s", None)
    if retry_after is not None:
        headers["Retry-After"] = str(max(1, int(retry_after)))
    if isinstance(exc, errors.LimitExceeded):
        status = exc.status
        extra["limit"] = exc.limit
    if isinstance(exc, errors.WebhookUrlRefused):
        extra["reason"] = exc.reason
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return problem(
        status,
        code=exc.code,
        title=title,
        detail=exc.message,
        error_type=error_type,
        param=getattr(exc, "param", None),
        headers=headers or None,
        extra=extra or None,
        error_code=error_code,
    )


async def handle_jobgate_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, errors.JobgateError)
    return answer(exc, openai=openai_surface(request.url.path))


def answer(exc: errors.JobgateError, *, openai: bool = False) -> Response:
    """The problem answer to a JobgateError a handler raised (an outage is logged too);
    `openai`: on a route of the OpenAI-compatible surface."""
    if isinstance(exc, errors.StorageUnavailable):
        log.warning("storage unavailable: %s", exc.message)
    return from_error(exc, openai=openai)


def invalid_request_of(
    exc: pydantic.ValidationError, at: tuple[str, ...] = ()
) -> errors.InvalidRequest:
    """A refusal of a value the handler validates itself (a body, a bulk item, a batch line;
    a parameter `at` `("query", "wait")`), named as FastAPI's validation error of a route's
    parameter is (handle_validation_error)."""
    first = exc.errors()[0]
    return invalid_request_named((*at, *first.get("loc", ())), str(first.get("msg")))


def invalid_request_named(loc: tuple[Any, ...], message: str) -> errors.InvalidRequest:
    """The refusal invalid_request_of words for a validation error `message` at `loc`."""
    param = ".".join(str(part) for part in loc) or None
    return errors.InvalidRequest(f"{param}: {message}" if param else message, param=param)


async def handle_validation_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    location = [str(part) for part in first.get("loc", ())]
    if location[:1] == ["body"]:  # FastAPI's prefix for the request body: the rest names the field
        location = location[1:]
    param = ".".join(location) or None
    if first.get("type") == "json_invalid":
        detail = "request body is not valid JSON"
        code = "invalid_json"
        param = None
    else:
        message = first.get("msg", "invalid request")
        detail = f"{param}: {message}" if param else message
        code = "invalid_request"
    return problem(
        400,
        code=code,
        title="Invalid request",
        detail=detail,
        error_type="invalid_request_error",
        param=param,
    )


async def handle_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names only the methods of the first route that matched the path; a path
        # served by several routes (GET and DELETE /v1/jobs/{id}) must list all of them.
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return problem(
        exc.status_code,
        code=code,
        title=str(exc.detail),
        detail=str(exc.detail),
        error_type="invalid_request_error",
        headers=headers or None,
        error_code=None if openai_surface(request.url.path) else _SAME,
    )


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


def unexpected(scope: Scope, exc: Exception) -> Response:
    """The 500 for an unhandled error, logged with its request id and traceback."""
    request_id.log_unhandled(scope, exc)
    rid = request_id.request_id(scope)
    return problem(
        500,
        code="internal_error",
        title="Internal error",
        detail=f"an internal error occurred (request {rid})",
        error_type="server_error",
        headers={request_id.HEADER: rid},
        extra={"request_id": rid},
    )


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    return unexpected(request.scope, exc)
