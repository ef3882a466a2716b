"""bench.loadgen's open loop: every request due is sent and timed, a dropped connection is
counted and replaced, and the sender never wakes more often than once per tick (a sender
that spins burns the core the server under test needs)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from bench import loadgen
from bench.peers.null_http import NullProtocol


class DroppingProtocol(NullProtocol):
    """Answers like the null server but closes every connection at its third request."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def on_message_complete(self) -> None:
        self.seen += 1
        if self.seen == 3 and self.transport is not None:
            self.transport.close()
            return
        super().on_message_complete()


async def serving(factory: Callable[[], asyncio.Protocol]) -> AsyncIterator[str]:
    server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


@pytest.fixture
async def null_url() -> AsyncIterator[str]:
    async for url in serving(NullProtocol):
        yield url


def spec(url: str, op: str, rate: float, **more: Any) -> dict[str, Any]:
    return {
        "mode": "open",
        "op": op,
        "url": url,
        "api_key": "unused",
        "rate": rate,
        "seconds": 0.5,
        "warmup_s": 0.1,
        "connections": 4,
        "body": {"input": "x"},
        "job_ids": ["a", "b"],
        **more,
    }


@pytest.mark.parametrize(("op", "status"), [("status", "200"), ("submit", "202")])
async def test_every_request_due_is_sent_answered_and_timed(
    null_url: str, op: str, status: str
) -> None:
    answer = await loadgen.open_loop(spec(null_url, op, 400))
    # 240 requests due over 0.6 s; the 200 due after the warm-up are the measured ones
    assert answer["statuses"] == {status: 200}
    assert answer["ok"] == 200
    assert answer["unanswered"] == 0
    assert answer["failures"] == []
    assert 0 <= answer["p50_ms"] <= answer["p99_ms"] <= answer["max_ms"]


async def test_a_dropped_connection_is_a_counted_failure_and_is_replaced() -> None:
    async for url in serving(DroppingProtocol):
        answer = await loadgen.open_loop(spec(url, "status", 400, warmup_s=0))
    failed = answer["statuses"].get("-1", 0)
    assert failed > 0
    assert answer["ok"] + failed == 200  # nothing lost, nothing counted twice
    assert answer["unanswered"] == 0
    assert answer["failures"][0].startswith("connection lost")


async def test_the_sender_wakes_at_most_once_per_tick(null_url: str) -> None:
    # 3,000/s: a request due every third of a millisecond, closer than uvloop's timers count
    started = time.perf_counter()
    answer = await loadgen.open_loop(spec(null_url, "status", 3000, seconds=0.3))
    elapsed = time.perf_counter() - started
    assert answer["unanswered"] == 0
    assert answer["sender_wakeups"] <= elapsed / loadgen.SENDER_TICK_S + 1
