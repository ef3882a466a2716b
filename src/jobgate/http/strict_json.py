"""One strict parse of every JSON request body, before FastAPI sees it.

orjson refuses NaN, Infinity, numbers that overflow a double, invalid UTF-8 and lone
surrogates; `ranges.check_json` then refuses what parses but cannot be stored or compared
(depth, 64-bit range, NUL). The parsed value is cached on the request, so FastAPI's model
validation and the handler's `await request.json()` read this one parse: there is no second
parser to disagree with the first.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request
from fastapi.routing import APIRoute
from starlette.responses import Response

from jobgate import errors
from jobgate.domain import ranges

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def parse(body: bytes) -> Any:
    """The JSON value of a request body; errors.InvalidRequest (400) for anything that is not
    JSON, or not a value jobgate can keep."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # orjson's message names the problem and its position, never the content.
        raise errors.InvalidRequest(
            f"request body is not valid JSON: {exc.msg} at character {exc.pos}", code="invalid_json"
        ) from None
    ranges.check_json(value)
    return value


class StrictJsonRoute(APIRoute):
    """An APIRoute whose JSON body is parsed once, strictly (see the module docstring)."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict_handler(request: Request) -> Response:
            if request.method in _BODY_METHODS and _is_json(request):
                body = await request.body()
                if body:
                    # Starlette's Request.json() returns this cached value.
                    request._json = parse(body)
            return await handler(request)

        return strict_handler


def _is_json(request: Request) -> bool:
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return not content_type or content_type == "application/json" or content_type.endswith("+json")
