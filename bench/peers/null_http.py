"""The load generator's floor: an HTTP/1.1 server that answers every request at once with a
fixed JSON body (202 to a POST, 200 otherwise), with no framework and no database.

Measured with the same load generator and settings as jobgate and the FastAPI anchor
(bench.http_bench.http_floor): its latencies are what the generator and this machine's
scheduler add on their own, the floor under every other HTTP row at the same rate.

Run as `python -m bench.peers.null_http`: prints `listening on http://...`, serves until
stopped.
"""

from __future__ import annotations

import asyncio
import socket

import httptools
import uvloop

BODY = b'{"id":"job_00000000000000000000000000","status":"queued"}'


def _answer(status: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
    )


ACCEPTED = _answer(b"202 Accepted")
OK = _answer(b"200 OK")


class NullProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_message_complete(self) -> None:
        if self.transport is not None:
            self.transport.write(ACCEPTED if self.parser.get_method() == b"POST" else OK)


async def serve() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    server = await asyncio.get_running_loop().create_server(NullProtocol, sock=sock)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    await server.serve_forever()


def main() -> None:
    uvloop.run(serve())


if __name__ == "__main__":
    main()
