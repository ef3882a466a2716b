"""The optional access log (JOBGATE_ACCESS_LOG=1): one line per HTTP request with its method,
path (never the query or a header), status and latency, on the `jobgate.access` logger."""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobgate import clock

log = logging.getLogger("jobgate.access")


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp, *, clock_: clock.Clock | None = None) -> None:
        self.app = app
        self.clock = clock_ or clock.SystemClock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock.monotonic()
        status = 0

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            latency_ms = round((self.clock.monotonic() - started) * 1000, 1)
            method, path = scope.get("method", ""), scope.get("path", "")
            log.info(
                "%s %s %s %.1f ms",
                method,
                path,
                status or "-",
                latency_ms,
                extra={
                    "method": method,
                    "path": path,
                    "status_code": status or None,
                    "latency_ms": latency_ms,
                },
            )
