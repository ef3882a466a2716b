"""The fault-injection TCP proxy itself: passes, delays, blackholes and resets."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.proxy import TcpProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        with contextlib.suppress(OSError):
            while data := self.request.recv(4096):
                self.request.sendall(data)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with TcpProxy(server.server_address) as running:  # type: ignore[arg-type]
        yield running
    server.shutdown()
    server.server_close()


def _connect(proxy: TcpProxy) -> socket.socket:
    return socket.create_connection(proxy.address, timeout=5)


def test_passes_then_delays(proxy: TcpProxy) -> None:
    with _connect(proxy) as sock:
        sock.sendall(b"ping")
        assert sock.recv(16) == b"ping"
        proxy.delay(0.3)
        started = time.monotonic()
        sock.sendall(b"slow")
        assert sock.recv(16) == b"slow"
        assert time.monotonic() - started >= 0.5  # both directions wait


def test_blackhole_hangs_open_connections_and_new_ones(proxy: TcpProxy) -> None:
    with _connect(proxy) as old:
        old.sendall(b"a")
        assert old.recv(16) == b"a"
        proxy.blackhole()
        old.settimeout(0.5)
        old.sendall(b"b")
        with pytest.raises(TimeoutError):
            old.recv(16)
        with _connect(proxy) as new:
            new.settimeout(0.5)
            new.sendall(b"c")
            with pytest.raises(TimeoutError):
                new.recv(16)
    proxy.heal()
    with _connect(proxy) as healed:
        healed.sendall(b"d")
        assert healed.recv(16) == b"d"


def test_reset_tears_connections_down(proxy: TcpProxy) -> None:
    with _connect(proxy) as sock:
        sock.sendall(b"x")
        assert sock.recv(16) == b"x"
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"y")
            sock.recv(16)
    with pytest.raises(ConnectionResetError), _connect(proxy) as refused:
        refused.sendall(b"z")
        refused.recv(16)
    proxy.heal()
    with _connect(proxy) as sock:
        sock.sendall(b"ok")
        assert sock.recv(16) == b"ok"


def test_refuse_stops_listening_until_healed(proxy: TcpProxy) -> None:
    with _connect(proxy) as sock:
        sock.sendall(b"x")
        assert sock.recv(16) == b"x"
        proxy.refuse()
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"y")
            sock.recv(16)
    # Refused at connect: the client knows nothing was sent.
    with pytest.raises(ConnectionRefusedError):
        _connect(proxy)
    proxy.heal()
    with _connect(proxy) as sock:  # the same port again
        sock.sendall(b"back")
        assert sock.recv(16) == b"back"
