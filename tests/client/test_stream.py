"""Client.stream / AsyncClient.stream: live output deltas, resumed at Last-Event-ID after a
dropped connection (nothing lost or repeated), a reset announced on the delta it precedes, and
the stream's end at the terminal event; then the same against a real jobgate server."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from jobgate.client import AsyncClient, NotFoundError, OutputDelta
from tests.api_server import Api
from tests.client.fakes import FakeClock, FakeTimeAsyncClient, FakeTimeClient, job_json, problem
from tests.client.test_events import Broken


def delta(seq: int, text: str) -> bytes:
    data = json.dumps({"seq": seq, "text": text})
    return f"id: {seq}\nevent: output.delta\ndata: {data}\n\n".encode()


RESET = b'event: output.reset\ndata: {"seq": 3, "generation": 2}\n\n'
DONE = b"event: job.succeeded\ndata: " + json.dumps(job_json(status="succeeded")).encode() + b"\n\n"
STREAM = [delta(1, "Hel"), delta(2, "lo"), RESET, delta(3, "Hello"), delta(4, " again"), DONE]


def resuming_server() -> tuple[list[httpx.Request], Callable[[httpx.Request], httpx.Response]]:
    """First connection: two deltas, part of the reset, then it breaks. Then: the rest."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        assert request.url.path == "/v1/jobs/job_1/stream"
        headers = {"Content-Type": "text/event-stream"}
        if len(seen) == 1:
            return httpx.Response(200, headers=headers, stream=Broken([*STREAM[:2], RESET[:10]]))
        after = int(request.headers.get("Last-Event-ID", "0"))
        assert after == 2
        return httpx.Response(
            200, headers=headers, content=b": keep-alive\n\n" + b"".join(STREAM[2:])
        )

    return seen, handler


def test_a_dropped_stream_resumes_and_the_reset_is_announced() -> None:
    seen, handler = resuming_server()
    with FakeTimeClient(handler, FakeClock()) as client:
        deltas = list(client.stream("job_1"))
    assert deltas == ["Hel", "lo", "Hello", " again"]
    assert [(d.seq, d.reset) for d in deltas] == [(1, False), (2, False), (3, True), (4, False)]
    assert "Last-Event-ID" not in seen[0].headers and seen[1].headers["Last-Event-ID"] == "2"
    assert len(seen) == 2  # the terminal event ended it: no further reconnect


async def test_the_async_stream_resumes_the_same_way() -> None:
    seen, handler = resuming_server()
    async with FakeTimeAsyncClient(handler, FakeClock()) as client:
        deltas = [d async for d in client.stream("job_1")]
    assert "".join(deltas) == "HelloHello again" and deltas[2].reset
    assert seen[1].headers["Last-Event-ID"] == "2"


def test_a_stream_closed_early_is_resumed_and_unknown_jobs_raise() -> None:
    calls: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.headers.get("Last-Event-ID"))
        if len(calls) == 1:  # a server restart: a clean close before the terminal event
            return httpx.Response(200, content=delta(1, "a"))
        return httpx.Response(200, content=delta(2, "b") + DONE)

    with FakeTimeClient(handler, FakeClock()) as client:
        assert list(client.stream("job_1")) == ["a", "b"]
    assert calls == [None, "1"]
    with FakeTimeClient(lambda r: problem(404, "not_found"), FakeClock()) as client:
        with pytest.raises(NotFoundError):
            list(client.stream("job_x"))


def test_submit_asks_for_a_stream() -> None:
    bodies: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(202, json=job_json())

    with FakeTimeClient(handler, FakeClock()) as client:
        client.submit("/v1/chat/completions", {"model": "m"}, stream=True)
        client.submit("/v1/chat/completions", {"model": "m"})
    assert bodies[0]["stream"] is True and "stream" not in bodies[1]


def test_an_output_delta_is_a_string() -> None:
    piece = OutputDelta("text", seq=7, reset=True)
    assert piece == "text" and isinstance(piece, str) and (piece.seq, piece.reset) == (7, True)


@pytest.mark.asyncio
async def test_against_a_real_server(api: Api) -> None:
    key = await api.key("acme")
    worker = api.runtime.worker()
    async with AsyncClient(api.url, key) as client:
        job = await client.submit(
            "/v1/chat/completions",
            {"model": "sim-echo", "messages": [{"role": "user", "content": "live text"}],
             "sim": {"chunks": 4}},
            stream=True,
        )  # fmt: skip
        await worker.run_once()
        deltas = [d async for d in client.stream(job.id)]
        assert "".join(deltas) == "echo: live text"
        assert [d.seq for d in deltas] == list(range(1, len(deltas) + 1))
        assert [d async for d in client.stream(job.id, starting_after=deltas[-1].seq)] == []
