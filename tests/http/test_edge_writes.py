"""The HTTP protocol's writes and clocks per request (http.middleware.edge_limits), over a recording
transport: an answer with a Content-Length leaves in one write (head and body together), while
chunked and HEAD answers are written as uvicorn writes them; a request that arrives whole in
one read arms no timer, one that arrives in parts has its clocks running after the first."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from jobgate.config import Settings
from jobgate.http.middleware import edge_limits

BODY = b'{"ok":true}'


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5555)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["path"] == "/chunked":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await send({"type": "http.response.body", "body": b"two", "more_body": False})
        return
    if scope["path"] == "/broken":
        headers = [(b"content-length", b"%d" % len(BODY))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        raise RuntimeError("the body never came")
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})


async def connection() -> tuple[Any, RecordingTransport]:
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        server_header=False,
        date_header=False,
        http=edge_limits.protocol_class(Settings(database_url="sqlite:///unused.db")),
    )
    config.load()
    protocol: Any = config.http_protocol_class(  # type: ignore[call-arg]
        config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = RecordingTransport()
    protocol.connection_made(transport)
    return protocol, transport


async def served(protocol: Any) -> None:
    for _ in range(50):
        await asyncio.sleep(0)
        if protocol.cycle is not None and protocol.cycle.response_complete:
            return
    raise AssertionError("no complete answer")


async def test_an_answer_with_a_content_length_leaves_in_one_write() -> None:
    protocol, transport = await connection()
    for _ in range(2):  # and again on the kept-alive connection
        transport.writes.clear()
        protocol.data_received(b"GET /job HTTP/1.1\r\nHost: x\r\n\r\n")
        await served(protocol)
        assert len(transport.writes) == 1, transport.writes
        (written,) = transport.writes
        assert written.startswith(b"HTTP/1.1 200 OK\r\n")
        assert written.endswith(b"\r\n\r\n" + BODY)
    protocol.connection_lost(None)


async def test_chunked_and_head_answers_are_written_as_before() -> None:
    protocol, transport = await connection()
    protocol.data_received(b"GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n")
    await served(protocol)
    assert len(transport.writes) == 3  # the head at once, then each chunk
    assert transport.writes[0].endswith(b"transfer-encoding: chunked\r\n\r\n")
    transport.writes.clear()
    protocol.data_received(b"HEAD /job HTTP/1.1\r\nHost: x\r\n\r\n")
    await served(protocol)
    assert len(transport.writes) == 1 and transport.writes[0].endswith(b"\r\n\r\n")
    protocol.connection_lost(None)


async def test_a_held_head_is_written_before_the_connection_closes() -> None:
    protocol, transport = await connection()
    protocol.data_received(b"GET /broken HTTP/1.1\r\nHost: x\r\n\r\n")
    for _ in range(50):
        await asyncio.sleep(0)
        if transport.closed:
            break
    assert transport.closed
    assert transport.writes and transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    protocol.connection_lost(None)


class CountingLoop:
    """The protocol's loop, counting the timers armed."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.armed = 0

    def call_later(self, *args: Any) -> asyncio.TimerHandle:
        self.armed += 1
        return self.loop.call_later(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loop, name)


async def test_timers_run_only_for_a_request_still_arriving() -> None:
    protocol, _ = await connection()
    protocol.data_received(b"GET /job HTTP/1.1\r\nHost: x\r\n\r\n")  # disarms the opening's
    await served(protocol)
    protocol.loop = loop = CountingLoop(protocol.loop)
    protocol.data_received(b"GET /job HTTP/1.1\r\nHost: x\r\n\r\n")
    # Whole in one read: neither the head's nor the receipt's clock was armed.
    assert loop.armed == 0
    assert protocol._head_timer is None and protocol._receipt_timer is None
    await served(protocol)
    protocol.data_received(b"GET /job HTTP/1.1\r\nHost: x\r\n")
    assert protocol._head_timer is not None and protocol._receipt_timer is not None
    protocol.data_received(b"\r\n")
    assert protocol._head_timer is None and protocol._receipt_timer is None
    await served(protocol)
    protocol.data_received(b"POST /job HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
    assert protocol._head_timer is None and protocol._receipt_timer is not None
    protocol.data_received(b"cd")
    assert protocol._receipt_timer is None
    await served(protocol)
    protocol.connection_lost(None)
