"""A request id for every answer (`X-Request-Id`), and the log line of an unhandled error.

The id is made here, never taken from the client, so a log search by it finds this request
only. An unhandled error is logged with its type, a scrubbed message and the traceback's
frames (file, line, function, source line: never local values), so a 500 can be diagnosed
from the log without a key or a prompt ever reaching it.
"""

from __future__ import annotations

import logging
import os
import re
import traceback
from collections.abc import Callable

from starlette.datastructures import MutableHeaders
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "X-Request-Id"
MAX_MESSAGE_CHARS = 300
MAX_FRAMES = 16  # the innermost ones; the outer ones are the framework's middleware
log = logging.getLogger("jobgate.http.problems")
# Anything shaped like a credential: jobgate keys and job tokens, provider keys, webhook secrets,
# bearer tokens.
_SECRET = re.compile(r"(?:jg[ot]?_|sk-|whsec_|Bearer\s+)[A-Za-z0-9_\-+/=.]+", re.IGNORECASE)


def new_id() -> str:
    # secrets.token_hex(12) is os.urandom(12).hex() behind three Python calls (token_hex,
    # token_bytes, SystemRandom.randbytes): the same bytes, made on every request.
    return "req_" + os.urandom(12).hex()


def request_id(scope: Scope) -> str:
    """This request's id (set by RequestIdMiddleware; `-` outside it)."""
    return str(scope.get("state", {}).get("request_id", "-"))


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp, *, answer: Callable[[Scope, Exception], Response]) -> None:
        self.app = app
        self.answer = answer  # the 500 for an unhandled error (it logs it)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = new_id()
        scope.setdefault("state", {})["request_id"] = rid
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            # Answered and logged here, not re-raised: the server's own handler would log the
            # raw message (which may quote a key or a prompt) a second time.
            if started:
                log_unhandled(scope, exc)
                return
            response = self.answer(scope, exc)
            await response(scope, receive, send)


def describe(exc: BaseException) -> str:
    """`Type: message` with anything secret-shaped redacted and the length bounded (a message
    may quote input: only its start is kept)."""
    message = _SECRET.sub("[redacted]", str(exc))
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "…"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def frames(exc: BaseException) -> str:
    """The traceback's innermost frames, without the exception's own message."""
    return "".join(traceback.format_tb(exc.__traceback__)[-MAX_FRAMES:]).rstrip()


def log_unhandled(scope: Scope, exc: BaseException) -> None:
    log.error(
        "unhandled error in %s %s (request %s): %s\n%s",
        scope.get("method", "-"),
        scope.get("path", "-"),
        request_id(scope),
        describe(exc),
        frames(exc),
    )
