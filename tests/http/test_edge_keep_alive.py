"""The keep-alive clock of http.edge_limits: an idle connection is closed `timeout_keep_alive`
after its last answer, as uvicorn closes it, but with one timer per connection instead of one
armed and cancelled per request: when it fires while the connection has answered since, it is
re-armed for the rest; while a request is under way it waits for that request's answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tests.http.test_edge_writes import RecordingTransport, connection, served

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
