"""A batch input file's lines as they arrive (services.files.split_lines): the same lines
whatever the network cut the body into, a long line split in linear time, and a body or a
line past its limit refused as it arrives (each line's checker is wire.openai_batches',
tested in tests/wire/test_openai_batches.py)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobgate import errors
from jobgate.services.files import split_lines


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=10),
    trailing=st.booleans(),
)
def test_split_lines_ignores_where_the_body_was_cut(
    lines: list[bytes], cuts: list[int], trailing: bool
) -> None:
    data = b"\n".join(lines) + (b"\n" if trailing and lines else b"")
    points = sorted({0, len(data), *[c for c in cuts if c <= len(data)]})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]

    async def stream() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    async def collect() -> list[bytes]:
        return [line async for line in split_lines(stream(), max_bytes=10_000)]

    *whole, last = data.split(b"\n")  # JSONL ends lines at \n only (a \r stays in the line)
    assert asyncio.run(collect()) == [line + b"\n" for line in whole] + ([last] if last else [])


def test_split_lines_stops_past_the_limit() -> None:
    async def stream() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"x" * 100 + b"\n"

    async def collect() -> list[bytes]:
        return [line async for line in split_lines(stream(), max_bytes=250)]

    with pytest.raises(errors.PayloadTooLarge):
        asyncio.run(collect())


def test_a_line_without_newline_is_split_in_linear_time() -> None:
    """16 MiB of one line in 16 KiB pieces: each piece is searched and copied once (~20 ms).
    Searching and copying the whole pending line at every piece, as before, took seconds (an
    80 MB line took 176 s); the bound leaves a wide margin for a loaded machine."""
    piece = b"x" * (16 * 1024)

    async def stream() -> AsyncIterator[bytes]:
        for _ in range(1024):
            yield piece

    async def collect() -> list[bytes]:
        return [line async for line in split_lines(stream(), max_bytes=32 * 1024 * 1024)]

    started = time.perf_counter()
    (whole,) = asyncio.run(collect())
    assert len(whole) == 16 * 1024 * 1024
    assert time.perf_counter() - started < 2.0


def test_a_line_past_the_request_limit_is_refused_as_it_arrives() -> None:
    pieces = [b'{"custom_id": "a"}\n', b"y" * 600, b"y" * 600, b"never read\n"]
    read: list[bytes] = []

    async def stream() -> AsyncIterator[bytes]:
        for piece in pieces:
            read.append(piece)
            yield piece

    async def collect() -> list[bytes]:
        lines = split_lines(stream(), max_bytes=10_000, max_line_bytes=1000)
        return [line async for line in lines]

    with pytest.raises(errors.PayloadTooLarge, match="line 2 is longer than 1000 bytes"):
        asyncio.run(collect())
    assert read == pieces[:3]  # refused at the piece that passed the limit
