"""One strict parse of every JSON request body, before FastAPI sees it.

orjson refuses NaN, Infinity, numbers that overflow a double, invalid UTF-8 and lone
surrogates; `ranges.check_json` then refuses what parses but cannot be stored or compared
(depth, 64-bit range, NUL). The parsed value is cached on the request, so FastAPI's model
validation and the handler's `await request.json()` read this one parse: there is no second
parser to disagree with the first.
"""

from __future__ import annotations

import re
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
        param = path_at(body.decode("utf-8", "replace"), exc.pos)
        where = f"{param}: " if param else ""
        raise errors.InvalidRequest(
            f"{where}request body is not valid JSON: {exc.msg} at character {exc.pos}",
            param=param,
            code="invalid_json",
        ) from None
    ranges.check_json(value)
    return value


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[{}\[\],:]')


def path_at(text: str, position: int) -> str | None:
    """The dotted path of the member being read at `position` of a JSON text (where a parser
    stopped), e.g. `metadata.n` or `body.messages.0.content`; None at the top level. Strings
    are skipped by a regex, so this is cheap even for a large body."""
    stack: list[list[Any]] = []  # [is_object, key or index]
    last_string = ""
    for match in _TOKEN.finditer(text, 0, position):
        token = match.group()
        if token[0] == '"':
            last_string = token
        elif token in "{[":
            stack.append([token == "{", None if token == "{" else 0])
        elif token in "}]":
            if stack:
                stack.pop()
        elif stack and token == ":" and stack[-1][0]:
            stack[-1][1] = _key(last_string)
        elif stack and token == ",":
            stack[-1][1] = None if stack[-1][0] else stack[-1][1] + 1
    path = [str(key) for _, key in stack if key is not None]
    return ".".join(path) or None


def _key(token: str) -> str:
    try:
        key = orjson.loads(token)
    except orjson.JSONDecodeError:
        key = token.strip('"')
    return str(key)[:100]


class StrictJsonRoute(APIRoute):
    """An APIRoute whose JSON body is parsed once, strictly (see the module docstring)."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def strict_handler(request: Request) -> Response:
            if request.method in _BODY_METHODS:
                body = await request.body()
                require_json(request, body)
                if body:
                    # Starlette's Request.json() returns this cached value.
                    request._json = parse(body)
            return await handler(request)

        return strict_handler


def require_json(request: Request, body: bytes) -> None:
    """`require_type` of a Starlette request."""
    require_type(request.headers.get("content-type", ""), body)


def require_type(content_type: str, body: bytes) -> None:
    """Raise errors.InvalidRequest (400 `invalid_content_type`) for a body sent as another
    type than JSON (`content_type`: the header, "" when absent): `curl -d` sends a form unless
    told otherwise, and such a body would only meet a validation error about its shape, not
    what to send instead."""
    if not body:
        return
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type and media_type != "application/json" and not media_type.endswith("+json"):
        raise errors.InvalidRequest(
            "the request body must be JSON sent with `Content-Type: application/json`; this "
            f"request's Content-Type is {media_type!r}",
            code="invalid_content_type",
        )
