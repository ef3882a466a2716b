"""Refuse request bodies over the limit without reading them whole (413)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobgate import errors
from jobgate.http import problems


class BodyLimitMiddleware:
    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int, path_limits: dict[str, int] | None = None
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.path_limits = path_limits or {}  # exact path -> its own limit (file uploads)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope.get("path", ""), self.max_body_bytes)
        if _declared_length(scope) > limit:
            # Answer before reading a byte of the body.
            await _refusal(limit)(scope, receive, send)
            return
        guard = _Guard(receive, send, limit)
        try:
            await self.app(scope, guard.receive, guard.send)
        except Exception:
            if not guard.too_large:
                raise
        if guard.too_large and not guard.started:
            await _refusal(limit)(scope, receive, send)


class _Guard:
    """The app's receive and send for one request: past the limit the app sees a disconnect,
    and its own answer is dropped (replaced by a 413 when none was started)."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive = receive
        self._send = send
        self._limit = limit
        self._received = 0
        self.too_large = False
        self.started = False

    async def receive(self) -> Message:
        if self.too_large:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if self._received > self._limit:
                self.too_large = True
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.too_large:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


def _declared_length(scope: Scope) -> int:
    """The request's Content-Length (each one, if it names several: the largest), else 0."""
    declared = 0
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                declared = max(declared, int(value))
            except ValueError:
                pass
    return declared


def _refusal(limit: int) -> ASGIApp:
    response = problems.from_error(errors.PayloadTooLarge(limit))
    response.headers["Connection"] = "close"
    return response
