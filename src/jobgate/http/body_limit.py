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
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    # Answer before reading a byte of the body.
                    response = problems.from_error(errors.PayloadTooLarge(limit))
                    response.headers["Connection"] = "close"
                    await response(scope, receive, send)
                    return
        received = 0
        too_large = False
        started = False

        async def counting_receive() -> Message:
            # Past the limit the app sees a disconnect; its own answer is replaced by a 413.
            nonlocal received, too_large
            if too_large:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    too_large = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if too_large:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not too_large:
                raise
        if too_large and not started:
            response = problems.from_error(errors.PayloadTooLarge(limit))
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
