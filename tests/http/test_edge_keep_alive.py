"""The keep-alive clock of http.middleware.edge_limits: an idle connection is closed
`timeout_keep_alive` after its last answer, as uvicorn closes it, but with one timer per connection
instead of one armed and cancelled per request: when it fires while the connection has answered
since, it is re-armed for the rest; while a request is under way it waits for that request's
answer."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.http.test_edge_writes import RecordingTransport, connection, served
from tests.support.processes import ProcessHarness

GET = b"GET /job HTTP/1.1\r\nHost: x\r\n\r\n"
KEEP_ALIVE_S = 5.0  # uvicorn's default


@dataclass
class Timer:
    when: float
    callback: Any
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class ClockLoop:
    """The protocol's loop with a clock the test moves; its timers are recorded, and fired by
    the test, not by the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.now = 1000.0
        self.timers: list[Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any, *args: Any) -> Timer:
        timer = Timer(when, lambda: callback(*args))
        timer.callback.name = callback.__name__
        self.timers.append(timer)
        return timer

    def call_later(self, delay: float, callback: Any, *args: Any) -> Timer:
        return self.call_at(self.now + delay, callback, *args)

    def keep_alive_timers(self) -> list[Timer]:
        return [t for t in self.timers if t.callback.name.startswith(("timeout_keep", "_keep"))]

    def fire_due(self) -> None:
        for timer in list(self.timers):
            if not timer.cancelled and timer.when <= self.now:
                self.timers.remove(timer)
                timer.callback()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loop, name)


async def clocked() -> tuple[Any, RecordingTransport, ClockLoop]:
    protocol, transport = await connection()
    protocol.data_received(GET)  # the connection's first request disarms its opening's clocks
    await served(protocol)
    loop = ClockLoop(protocol.loop)
    protocol.loop = loop
    if protocol.timeout_keep_alive_task is not None:  # armed on the real loop: moved to ours
        protocol.timeout_keep_alive_task.cancel()
        protocol.timeout_keep_alive_task = None
    return protocol, transport, loop


async def test_answers_on_a_kept_alive_connection_arm_no_timer_each() -> None:
    protocol, transport, loop = await clocked()
    protocol.data_received(GET)
    await served(protocol)
    [first] = loop.keep_alive_timers()
    assert first.when == 1000 + KEEP_ALIVE_S
    for second in range(1, 4):
        loop.now = 1000.0 + second
        protocol.data_received(GET)
        await served(protocol)
    # uvicorn arms one after every answer and cancels it at the next request.
    assert loop.keep_alive_timers() == [first] and not first.cancelled
    loop.now = first.when
    loop.fire_due()  # idle for 2 s only: re-armed for the rest, 5 s after the last answer
    assert not transport.closed
    [rest] = loop.keep_alive_timers()
    assert rest.when == 1003 + KEEP_ALIVE_S
    loop.now = rest.when - 0.001
    loop.fire_due()
    assert not transport.closed
    loop.now = rest.when
    loop.fire_due()
    assert transport.closed
    protocol.connection_lost(None)


async def test_a_request_under_way_is_never_closed_by_the_keep_alive_clock() -> None:
    protocol, transport, loop = await clocked()
    protocol.data_received(GET)
    await served(protocol)
    loop.now = 1001.0
    protocol.data_received(b"GET /job HTTP/1.1\r\n")  # a head still arriving
    loop.now = 1000.0 + KEEP_ALIVE_S + 1
    loop.fire_due()
    assert not transport.closed
    assert loop.keep_alive_timers() == [] and protocol.timeout_keep_alive_task is None
    protocol.data_received(b"Host: x\r\n\r\n")
    await served(protocol)  # answered: the clock runs again, from this answer
    [timer] = loop.keep_alive_timers()
    assert timer.when == loop.now + KEEP_ALIVE_S
    loop.now = timer.when
    loop.fire_due()
    assert transport.closed
    protocol.connection_lost(None)


async def test_an_idle_connection_closes_on_the_real_loop() -> None:
    protocol, transport = await connection()
    protocol.timeout_keep_alive = 0.05
    protocol.data_received(GET)
    await served(protocol)
    protocol.data_received(GET)
    await served(protocol)
    async with asyncio.timeout(10):
        while not transport.closed:  # noqa: ASYNC110 (the loop's timer closes it)
            await asyncio.sleep(0.01)
    protocol.connection_lost(None)


async def test_a_lost_connection_leaves_no_keep_alive_timer() -> None:
    protocol, _transport = await connection()
    protocol.data_received(GET)
    await served(protocol)
    timer = protocol.timeout_keep_alive_task
    assert timer is not None
    protocol.connection_lost(ConnectionResetError())
    assert protocol.timeout_keep_alive_task is None and timer.cancelled()


@pytest.mark.e2e
def test_jobgate_api_closes_idle_connections_after_its_keep_alive_setting(tmp_path: Path) -> None:
    """`JOBGATE_KEEP_ALIVE_S` reaches the server: a connection idle for less stays open for the
    next request, and one idle for longer is closed by the server, counted from its last
    answer (with uvicorn's default, 5 s, it would still be open when this test looks)."""
    keep_alive_s = 2
    env = {
        "JOBGATE_DATABASE_URL": f"sqlite:///{tmp_path}/jobgate.db",
        "JOBGATE_KEEP_ALIVE_S": str(keep_alive_s),
    }
    with ProcessHarness(tmp_path, env=env) as harness:
        api = harness.start("api")
        assert api.url is not None
        host, port = api.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            assert _ask(sock).startswith(b"HTTP/1.1 200")
            time.sleep(keep_alive_s * 0.6)  # idle, but not for long enough
            assert _ask(sock).startswith(b"HTTP/1.1 200")  # the same connection answers
            answered = time.monotonic()
            assert sock.recv(1) == b""  # blocks until the server closes the idle connection
            idle = time.monotonic() - answered
        assert keep_alive_s - 0.1 <= idle < keep_alive_s + 2.0


def _ask(sock: socket.socket) -> bytes:
    """One keep-alive GET /healthz on `sock`: its whole answer (the head's Content-Length)."""
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += _received(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += _received(sock)
    return head + b"\r\n\r\n" + body


def _received(sock: socket.socket) -> bytes:
    data = sock.recv(65536)
    if not data:
        raise AssertionError("the server closed the connection before its answer")
    return data
