"""A request id for every answer (`X-Request-Id`), and the log line of an unhandled error.

The id is made here, never taken from the client, so a log search by it finds this request
only. An unhandled error is logged with its type, a scrubbed message and the traceback's
frames (file, line, function, source line: never local values), so a 500 can be diagnosed
from the log without a key or a prompt ever reaching it.
"""

from __future__ import annotations

import re
import secrets
import traceback

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-Id"
MAX_MESSAGE_CHARS = 300
# Anything shaped like a credential: jobgate keys, provider keys, webhook secrets, bearer tokens.
_SECRET = re.compile(r"(?:jgo?_|sk-|whsec_|Bearer\s+)[A-Za-z0-9_\-+/=.]+", re.IGNORECASE)


def request_id(scope: Scope) -> str:
    """This request's id (set by RequestIdMiddleware; `-` outside it)."""
    return str(scope.get("state", {}).get("request_id", "-"))


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = "req_" + secrets.token_hex(12)
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        await self.app(scope, receive, send_with_id)


def describe(exc: BaseException) -> str:
    """`Type: message` with anything secret-shaped redacted and the length bounded (a message
    may quote input: only its start is kept)."""
    message = _SECRET.sub("[redacted]", str(exc))
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def frames(exc: BaseException) -> str:
    """The traceback's frames, innermost last, without the exception's own message."""
    return "".join(traceback.format_tb(exc.__traceback__)).rstrip()
