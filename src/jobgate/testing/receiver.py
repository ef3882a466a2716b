"""A real HTTP(S) webhook receiver for tests and benchmarks: it listens on a local port in its
own thread (its own event loop), records every request, and answers as a script says (a status,
headers, a delay), counting how many requests it serves at once."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
import threading
import time
from collections.abc import Callable
from typing import Self


@dataclasses.dataclass(frozen=True, slots=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    status: int = 200
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    delay_s: float = 0.0


# (the request, its 0-based index) -> the reply
Script = Callable[[Received, int], Reply]
_REASONS = {200: "OK", 204: "No Content", 302: "Found", 410: "Gone", 429: "Too Many Requests"}


class WebhookReceiver:
    def __init__(
        self,
        script: Script | None = None,
        *,
        host: str = "127.0.0.1",
        ssl_context: ssl.SSLContext | None = None,
        record_bodies: bool = True,
    ) -> None:
        self.script: Script = script or (lambda _request, _index: Reply())
        self.host = host
        self.port = 0
        self.received: list[Received] = []
        self.count = 0
        self.concurrent = 0
        self.max_concurrent = 0
        self._ssl = ssl_context
        self._record = record_bodies
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        scheme = "https" if self._ssl else "http"
        return f"{scheme}://{self.host}:{self.port}/hook"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._serve, name="webhook-receiver", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the webhook receiver did not start")
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is not None and server is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def wait_for(self, count: int, timeout_s: float = 30.0) -> bool:
        """Block until `count` requests arrived (True) or `timeout_s` passes (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.count >= count:
                return True
            time.sleep(0.01)
        return self.count >= count

    # -- the server ----------------------------------------------------------------------

    def _serve(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._server = loop.run_until_complete(
            asyncio.start_server(self._connection, self.host, 0, ssl=self._ssl, backlog=1024)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Received(method, path, headers, body if self._record else b"")
                with self._lock:
                    index = self.count
                    if self._record:
                        self.received.append(request)
                    self.count += 1
                    self.concurrent += 1
                    self.max_concurrent = max(self.max_concurrent, self.concurrent)
                try:
                    reply = self.script(request, index)
                    if reply.delay_s:
                        await asyncio.sleep(reply.delay_s)
                finally:
                    with self._lock:
                        self.concurrent -= 1
                reason = _REASONS.get(reply.status, "Status")
                extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
                writer.write(
                    f"HTTP/1.1 {reply.status} {reason}\r\ncontent-length: 0\r\n{extra}\r\n".encode()
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()
