"""A TCP proxy for fault tests, put between a process and PostgreSQL or a provider:

    proxy = TcpProxy(("127.0.0.1", 5432)).start()     # listens on proxy.port
    proxy.delay(0.5)      # every chunk in either direction waits 0.5 s
    proxy.blackhole()     # connections stay open but nothing passes (a silent network drop)
    proxy.reset()         # every connection is torn down with a TCP RST, new ones too
    proxy.refuse()        # nothing listens: a connect is refused (RST to the SYN), nothing sent
    proxy.heal()          # pass traffic again (new connections; blackholed ones stay dead)
    proxy.cut_reply(b"s\x00\x00\x00\x04Z\x00\x00\x00\x05I")  # the next chunk from the
                          # server holding these bytes is dropped and its connection reset: a
                          # reply lost after the commit (PostgreSQL's PortalSuspended, then
                          # ReadyForQuery idle: the end of a committed fetchrow)
    proxy.cut_reply(b"pg_advisory_xact_lock", silently=True)  # that reply is dropped and its
                          # link blackholed: the client hears nothing more, and the server
                          # never learns that it is gone (a partition, not a reset)
    proxy.close()

It runs its own event loop in a daemon thread, so sync and async tests use it alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from types import TracebackType

PASS = "pass"
DELAY = "delay"
BLACKHOLE = "blackhole"
RESET = "reset"
REFUSE = "refuse"


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.blackholed = False

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                _rst(writer)
        for task in self.tasks:
            task.cancel()


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with SO_LINGER 0: the peer sees a connection reset, not an orderly close."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class TcpProxy:
    def __init__(self, upstream: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0):
        self.upstream = upstream
        self.host = host
        self.port = port
        self.mode = PASS
        self.delay_s = 0.0
        self.connections_total = 0
        self._cut_markers: list[tuple[bytes, bool]] = []  # (marker, silently)
        self.replies_cut = 0
        self._links: set[_Link] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # -- control (thread-safe) ---------------------------------------------------------

    def start(self) -> TcpProxy:
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def delay(self, seconds: float) -> None:
        """Hold every chunk `seconds` before forwarding it (order is kept)."""
        self._call(self._set, DELAY, seconds)

    def blackhole(self) -> None:
        """Stop forwarding: open connections hang, new ones connect but get no answer."""
        self._call(self._set, BLACKHOLE, 0.0)

    def reset(self) -> None:
        """Reset every open connection; refuse new ones with a reset until heal()."""
        self._call(self._set, RESET, 0.0)

    def refuse(self) -> None:
        """Stop listening until heal(): connecting fails at once (the SYN is answered with a
        RST), so a client knows that nothing it meant to send left. Open connections are reset.
        """
        self._call(self._set, REFUSE, 0.0)

    def heal(self) -> None:
        """Forward normally again (connections blackholed or reset before stay dead)."""
        self._call(self._set, PASS, 0.0)

    def cut_reply(self, marker: bytes, *, silently: bool = False) -> None:
        """The next chunk from upstream that contains `marker` is dropped and its connection
        reset both ways, once: the server did the work, its answer never arrives. `silently`:
        the connection is blackholed instead of reset, so that the server keeps it open and
        waits for a client that will never speak again (a network partition)."""
        self._call(self._cut_markers.append, (marker, silently))

    @property
    def open_connections(self) -> int:
        return len(self._links)

    def close(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout=10)
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _call(self, function: object, *args: object) -> None:
        assert self._loop is not None, "start() the proxy first"

        async def apply() -> None:
            result = function(*args)  # type: ignore[operator]
            if asyncio.iscoroutine(result):
                await result

        asyncio.run_coroutine_threadsafe(apply(), self._loop).result(timeout=10)

    # -- the loop thread ---------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._accept, self.host, self.port)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            # What is still pending (a link accepted while shutting down) ends here, not as
            # "Task was destroyed but it is pending" when the interpreter exits.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
        self._links.clear()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _set(self, mode: str, delay_s: float) -> None:
        self.mode = mode
        self.delay_s = delay_s
        if mode == BLACKHOLE:
            for link in self._links:
                link.blackholed = True
        elif mode in (RESET, REFUSE):
            for link in list(self._links):
                link.abort()
            self._links.clear()
        if mode == REFUSE:
            if self._server is not None:
                self._server.close()  # the listening socket closes at once
                self._server = None
        elif self._server is None:
            # Listen again on the same port (asyncio sets SO_REUSEADDR).
            self._server = await asyncio.start_server(self._accept, self.host, self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # CancelledError too: close() cancels these top-level handlers, and Python 3.11's
        # stream callback logs a cancelled handler task as an error.
        with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
            await self._serve(reader, writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_total += 1
        if self.mode == RESET:
            _rst(writer)
            return
        link = _Link(writer)
        self._links.add(link)
        try:
            if self.mode == BLACKHOLE:
                link.blackholed = True
                await _drain_forever(reader)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            except OSError:
                _rst(writer)
                return
            link.upstream = up_writer
            link.tasks = [
                asyncio.create_task(self._pipe(reader, up_writer, link)),
                asyncio.create_task(self._pipe(up_reader, writer, link, from_upstream=True)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            self._links.discard(link)
            for end in (writer, link.upstream):
                if end is not None and not end.transport.is_closing():
                    end.close()

    def _cut(self, chunk: bytes) -> tuple[bool, bool]:
        """Whether to cut at `chunk`, and whether silently."""
        for entry in self._cut_markers:
            marker, silently = entry
            if marker in chunk:
                self._cut_markers.remove(entry)
                self.replies_cut += 1
                return True, silently
        return False, False

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        from_upstream: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(_deliver(queue, writer, link))
        try:
            while True:
                chunk = await reader.read(65536)
                if link.blackholed:
                    if not chunk:
                        return
                    continue
                cut, silently = self._cut(chunk) if from_upstream else (False, False)
                if cut and silently:
                    link.blackholed = True
                    continue
                if cut:
                    link.abort()
                    return
                queue.put_nowait((loop.time() + self.delay_s, chunk))
                if not chunk:
                    await sender
                    return
        except (ConnectionError, OSError):
            link.abort()
        finally:
            if not sender.done():
                if link.blackholed:
                    sender.cancel()
                else:
                    with contextlib.suppress(Exception):
                        await sender
            elif not sender.cancelled():
                sender.exception()  # a reset peer ended it: seen, not "never retrieved"


async def _drain_forever(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while await reader.read(65536):
            pass


async def _deliver(
    queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter, link: _Link
) -> None:
    """Write each (due time, chunk) when due; an empty chunk is the end of the stream."""
    loop = asyncio.get_running_loop()
    while True:
        due, chunk = await queue.get()
        wait_s = due - loop.time()
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        if not chunk:
            with contextlib.suppress(OSError):
                writer.write_eof()
            return
        if link.blackholed:
            continue
        writer.write(chunk)
        await writer.drain()
