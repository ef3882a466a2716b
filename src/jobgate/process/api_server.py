"""The `api` role: uvicorn serving the FastAPI app, stopped like every other role."""

from __future__ import annotations

import contextlib
import socket

import uvicorn

from jobgate.config import Settings
from jobgate.http.app import serve_app
from jobgate.http.context import AppContext
from jobgate.http.middleware import edge_limits


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the process owns SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


class ApiServer:
    """Serve the API on `sock` (or on settings' host and port) until `request_stop()`; requests
    in flight get the shutdown grace to finish."""

    def __init__(
        self, context: AppContext, settings: Settings, *, sock: socket.socket | None = None
    ) -> None:
        config = uvicorn.Config(
            serve_app(context),
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=max(1, int(settings.shutdown_grace_s)),
            timeout_keep_alive=settings.keep_alive_s,
            server_header=False,
            http=edge_limits.protocol_class(settings),
        )
        self._server = _Server(config)
        self._sock = sock

    async def run(self) -> None:
        await self._server.serve(sockets=[self._sock] if self._sock is not None else None)

    def request_stop(self) -> None:
        self._server.should_exit = True
