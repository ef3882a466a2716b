"""The SSE decoder, and events(): a dropped stream resumes at Last-Event-ID, losing nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from jobgate.client import NotFoundError
from jobgate.client.sse import SSEDecoder
from tests.client.fakes import FakeClock, FakeTimeAsyncClient, FakeTimeClient, job_json, problem


def test_the_decoder_follows_the_event_stream_format() -> None:
    decoder = SSEDecoder()
    lines = [
        ": keep-alive",
        "id: 1",
        "event: job.event",
        'data: {"a":',
        "data: 1}",
        "",
        "",  # a stray blank line dispatches nothing
        "retry: 3000",
        "data:no space",
        "",
    ]
    events = [e for e in map(decoder.feed, lines) if e is not None]
    assert [(e.event, e.data, e.id) for e in events] == [
        ("job.event", '{"a":\n1}', "1"),
        ("message", "no space", "1"),  # the last id carries over
    ]
    assert events[1].retry_ms == 3000
    assert decoder.last_event_id == "1"


def frame(seq: int, frm: str | None, to: str) -> bytes:
    data = {
        "object": "job.event",
        "job_id": "job_1",
        "seq": seq,
        "from": frm,
        "to": to,
        "actor": "worker",
        "reason": None,
        "applied": True,
        "created_at": 1_700_000_000 + seq,
    }
    return f"id: {seq}\nevent: job.event\ndata: {json.dumps(data)}\n\n".encode()


class Broken(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that sends some frames, then the connection breaks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        raise httpx.ReadError("connection lost mid-stream")

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        raise httpx.ReadError("connection lost mid-stream")


TRANSITIONS = [(1, None, "queued"), (2, "queued", "running"), (3, "running", "succeeded")]


def resuming_server() -> tuple[list[httpx.Request], Callable[[httpx.Request], httpx.Response]]:
    """First stream: events 1-2 then a broken connection. Then: resumes after Last-Event-ID."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        assert request.headers["Accept"] == "text/event-stream"
        headers = {"Content-Type": "text/event-stream"}
        if len(seen) == 1:
            chunks = [frame(*t) for t in TRANSITIONS[:2]]
            chunks[1] = chunks[1][:30]  # the second frame arrives only in part
            return httpx.Response(200, headers=headers, stream=Broken([chunks[0], chunks[1]]))
        after = int(request.headers.get("Last-Event-ID", "0"))
        body = b": keep-alive\n\n" + b"".join(frame(*t) for t in TRANSITIONS if t[0] > after)
        return httpx.Response(200, headers=headers, content=body)

    return seen, handler


def test_a_dropped_stream_resumes_after_the_last_event_seen() -> None:
    seen, handler = resuming_server()
    with FakeTimeClient(handler, FakeClock()) as client:
        events = list(client.events("job_1"))
    assert [(e.seq, e.from_status, e.to_status) for e in events] == TRANSITIONS
    assert "Last-Event-ID" not in seen[0].headers
    assert seen[1].headers["Last-Event-ID"] == "1"  # event 2 never fully arrived
    assert len(seen) == 2  # the stream ended after the terminal event: no reconnect


async def test_the_async_stream_resumes_the_same_way() -> None:
    seen, handler = resuming_server()
    async with FakeTimeAsyncClient(handler, FakeClock()) as client:
        events = [e async for e in client.events("job_1")]
    assert [e.seq for e in events] == [1, 2, 3]
    assert seen[1].headers["Last-Event-ID"] == "1"


def test_a_stream_closed_before_the_end_is_resumed_and_one_started_past_the_end_stops() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.headers.get('Last-Event-ID')}")
        if request.method == "GET" and request.url.path == "/v1/jobs/job_1":
            return httpx.Response(200, json=job_json(status="succeeded"))
        after = int(request.headers.get("Last-Event-ID", "0"))
        # The server restarts after event 1: a clean close without the terminal event.
        chunks = [frame(*t) for t in TRANSITIONS if t[0] > after]
        return httpx.Response(200, content=chunks[0] if after == 0 else b"".join(chunks))

    with FakeTimeClient(handler, FakeClock()) as client:
        assert [e.seq for e in client.events("job_1")] == [1, 2, 3]
        calls.clear()
        assert list(client.events("job_1", after=3)) == []
    assert calls == ["GET 3", "GET None"]  # nothing new, and the job is terminal: done


def test_an_unknown_job_raises() -> None:
    with FakeTimeClient(lambda r: problem(404, "not_found"), FakeClock()) as client:
        with pytest.raises(NotFoundError):
            list(client.events("job_x"))
