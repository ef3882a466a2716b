"""The bounded HTTP edge over a real server and raw sockets: an oversized head answers 431 and
is dropped early (memory does not grow), too many headers 431, a long request target 414, and
a head that trickles in is closed at its deadline; ordinary large bodies still pass."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from jobgate.config import Settings
from tests.api_server import Api

pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
HEAD_TIMEOUT_S = 0.5


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        shutdown_grace_s=0,
        request_head_timeout_s=HEAD_TIMEOUT_S,
    )


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def _connect(api: Api) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = api.url.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


async def _answer(reader: asyncio.StreamReader) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(4096), 5)
    except ConnectionError:
        return b""


async def test_a_64_mb_header_is_refused_early_without_growing_memory(api: Api) -> None:
    before = _rss_bytes()
    reader, writer = await _connect(api)
    answer = asyncio.create_task(_answer(reader))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
    chunk = b"a" * (256 * 1024)
    sent = 0
    try:
        while sent < 64 * 1024 * 1024 and not answer.done():
            writer.write(chunk)
            await asyncio.wait_for(writer.drain(), 5)
            sent += len(chunk)
    except (ConnectionError, TimeoutError):
        pass
    refused = await answer
    writer.close()
    assert refused.startswith(b"HTTP/1.1 431 "), refused[:80]
    assert sent < 16 * 1024 * 1024, sent  # answered after the first 64 KiB, not at the end
    assert _rss_bytes() - before < 32 * 1024 * 1024
    assert (await api.http.get("/healthz")).status_code == 200  # the server is still up


async def test_too_many_header_fields_answer_431(api: Api) -> None:
    reader, writer = await _connect(api)
    headers = b"".join(b"X-H%d: 1\r\n" % i for i in range(150))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    answer = await _answer(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:80]


async def test_a_long_request_target_answers_414(api: Api) -> None:
    reader, writer = await _connect(api)
    writer.write(b"GET /healthz?" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = await _answer(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 414 "), answer[:80]


async def test_a_trickling_head_is_closed_at_its_deadline(api: Api) -> None:
    reader, writer = await _connect(api)
    started = time.monotonic()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    closed = False
    for _ in range(40):
        try:
            writer.write(b"X-A: 1\r\n")
            await writer.drain()
        except ConnectionError:
            closed = True
            break
        if reader.at_eof() or await _eof_within(reader, 0.1):
            closed = True
            break
    writer.close()
    elapsed = time.monotonic() - started
    assert closed and HEAD_TIMEOUT_S * 0.8 <= elapsed < HEAD_TIMEOUT_S + 3, elapsed


async def _eof_within(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout_s) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def test_normal_heads_and_large_bodies_still_pass(api: Api) -> None:
    key = await api.key("acme")
    big = "x" * (900 * 1024)  # one read holds head and body: the head bound must not count it
    response = await api.http.post(
        "/v1/jobs",
        json={
            "endpoint": "/v1/chat/completions",
            "body": {"model": "sim-echo", "messages": [{"role": "user", "content": big}]},
        },
        headers={"Authorization": f"Bearer {key}", "X-Long": "v" * 30_000},
    )
    assert response.status_code == 202, response.text
    reader, writer = await _connect(api)
    # Keep-alive: three requests on one connection, each head counted afresh.
    for _ in range(3):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 40_000 + b"\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 "), head
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
    writer.close()


def _problem(answer: bytes, status: int) -> dict[str, object]:
    """The problem+json body of a whole raw answer (the connection closed after it)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 %d " % status), answer[:200]
    assert b"content-type: application/problem+json" in head.lower(), head
    problem = json.loads(body)
    assert isinstance(problem, dict) and problem["status"] == status
    assert problem["error"]["type"] == "invalid_request_error"
    return problem


async def _whole_answer(reader: asyncio.StreamReader) -> bytes:
    try:
        return await asyncio.wait_for(reader.read(), 5)
    except ConnectionError:
        return b""


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nIdempotency-Key: a\x7fb\r\n\r\n",  # DEL
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n",  # a control character
        b"GET /healthz HTTP/1.1\r\nBad Name: 1\r\n\r\n",  # a space in a field name
        b"GET /he\x00althz HTTP/1.1\r\nHost: x\r\n\r\n",  # NUL in the target
        b"BREW /healthz HTTP/9.9\r\n\r\n",  # no HTTP version that exists
    ],
)
async def test_a_request_the_parser_refuses_answers_a_problem(api: Api, head: bytes) -> None:
    reader, writer = await _connect(api)
    writer.write(head)
    answer = await _whole_answer(reader)
    writer.close()
    problem = _problem(answer, 400)
    assert problem["code"] == "invalid_http_request"


async def test_the_head_bounds_answer_problems(api: Api) -> None:
    reader, writer = await _connect(api)
    headers = b"".join(b"X-H%d: 1\r\n" % i for i in range(150))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
    problem = _problem(await _whole_answer(reader), 431)
    writer.close()
    assert problem["code"] == "request_header_fields_too_large"
    reader, writer = await _connect(api)
    writer.write(b"GET /healthz?" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    problem = _problem(await _whole_answer(reader), 414)
    writer.close()
    assert problem["code"] == "uri_too_long"
