"""A small HTTP/1.1 server on asyncio streams and h11, for the provider simulator.

An ASGI server cannot misbehave on purpose: it answers 500 when a handler fails and cannot
close a connection without a response. The simulator must (drop after accepting a request,
hang until the client gives up), so it owns the socket. Keep-alive, chunked streaming and
Content-Length bodies are supported; nothing else is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import h11
import orjson

log = logging.getLogger(__name__)
_READ_SIZE = 65_536


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body) if self.body else None


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def json(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
        return cls(
            status,
            orjson.dumps(payload),
            {"content-type": "application/json", **(headers or {})},
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Stream:
    status: int
    chunks: AsyncIterator[bytes]
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


class Drop:
    """Close the connection at once, without an answer (the request was accepted)."""


class _Stall(bytes):
    """A Stream's chunk that sends nothing more: the answer stays open, silent, until the
    client closes the connection (a provider's stream that stalled)."""


STALL = _Stall()


class Hang:
    """Never answer; wait until the client closes the connection."""


Answer = Reply | Stream | Drop | Hang
Handler = Callable[[Request], Awaitable[Answer]]


class H11Server:
    def __init__(self, handler: Handler, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._handler = handler
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        # Aborting the sockets ends every handler (a cancelled handler task would make
        # asyncio's stream callback log a spurious error).
        for writer in list(self._connections.values()):
            writer.transport.abort()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            await self._serve(reader, writer)
        except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
            pass
        finally:
            self._connections.pop(task, None)
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        while True:
            request = await _read_request(conn, reader)
            if request is None:
                return
            try:
                answer = await self._handler(request)
            except Exception:
                log.exception("simulator handler failed")
                answer = Reply.json(500, {"error": {"message": "simulator bug", "type": "bug"}})
            if isinstance(answer, Drop):
                return  # `finally` aborts the transport: no answer, no FIN handshake niceties
            if isinstance(answer, Hang):
                while await reader.read(_READ_SIZE):
                    pass
                return
            if not await _send(conn, reader, writer, answer):
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            conn.start_next_cycle()


async def _read_request(conn: h11.Connection, reader: asyncio.StreamReader) -> Request | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(_READ_SIZE)
            conn.receive_data(data)
            continue
        if isinstance(event, h11.ConnectionClosed):
            return None
        if isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            target = urlsplit(head.target.decode("latin-1"))
            return Request(
                method=head.method.decode("ascii"),
                path=target.path,
                query=dict(parse_qsl(target.query)),
                headers={k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers},
                body=bytes(body),
            )


async def _send(
    conn: h11.Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    answer: Reply | Stream,
) -> bool:
    """Send `answer`; False when it stalled and the client has since gone (close)."""
    headers = [(k, v) for k, v in answer.headers.items()]
    if isinstance(answer, Reply):
        headers.append(("content-length", str(len(answer.body))))
        writer.write(conn.send(h11.Response(status_code=answer.status, headers=headers)))
        if answer.body:
            writer.write(conn.send(h11.Data(data=answer.body)))
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        return True
    writer.write(conn.send(h11.Response(status_code=answer.status, headers=headers)))
    await writer.drain()
    async for chunk in answer.chunks:
        if chunk is STALL:
            while await reader.read(_READ_SIZE):
                pass
            return False
        if chunk:
            writer.write(conn.send(h11.Data(data=chunk)))
            await writer.drain()
    writer.write(conn.send(h11.EndOfMessage()))
    await writer.drain()
    return True
