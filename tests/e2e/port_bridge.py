"""Carries TCP connections across a network namespace's wall through a Unix socket (a file,
seen from both sides): `tcp-to-unix PORT PATH` listens on 127.0.0.1:PORT and relays each
connection to the socket at PATH; `unix-to-tcp PATH HOST PORT` listens at PATH and relays to
HOST:PORT. Run one inside the namespace and one outside, and a service of the machine
(PostgreSQL, Redis) answers at its usual address inside. Prints `ready` once listening."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable

Connect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()


def _relay(connect: Connect) -> Callable[..., Awaitable[None]]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            far_reader, far_writer = await connect()
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, far_writer), _pipe(far_reader, writer))
        far_writer.close()
        writer.close()

    return handle


async def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "tcp-to-unix":
        port, path = int(argv[1]), argv[2]
        server = await asyncio.start_server(
            _relay(lambda: asyncio.open_unix_connection(path)), "127.0.0.1", port
        )
    elif mode == "unix-to-tcp":
        path, host, far_port = argv[1], argv[2], int(argv[3])
        server = await asyncio.start_unix_server(
            _relay(lambda: asyncio.open_connection(host, far_port)), path
        )
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(sys.argv[1:]))
