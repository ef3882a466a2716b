"""Slow clients cannot starve normal ones: many connections that trickle a request head one
byte at a time (slowloris) are closed once the receipt bound passes, and meanwhile ordinary
requests are answered."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ProcessHarness, wait_until

SLOW_CLIENTS = 200
RECEIPT_TIMEOUT_S = 2.0


class _Slowloris:
    """Opens connections and sends a never-ending request head, a byte at a time."""

    def __init__(self, host: str, port: int, count: int) -> None:
        self.sockets: list[socket.socket] = []
        self.closed_by_server = 0
        self._stop = threading.Event()
        for _ in range(count):
            sock = socket.create_connection((host, port), timeout=5)
            sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\n")
            self.sockets.append(sock)
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()

    def _trickle(self) -> None:
        while not self._stop.wait(0.2):
            for sock in list(self.sockets):
                try:
                    sock.sendall(b"X")
                except OSError:
                    self.sockets.remove(sock)
                    self.closed_by_server += 1
                    sock.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()


@pytest.mark.e2e
def test_slow_header_clients_cannot_starve_normal_clients(tmp_path: Path) -> None:
    env = {
        "JOBGATE_DATABASE_URL": f"sqlite:///{tmp_path}/jobgate.db",
        "JOBGATE_REQUEST_RECEIPT_TIMEOUT_S": str(RECEIPT_TIMEOUT_S),
    }
    with ProcessHarness(tmp_path, env=env) as harness:
        serve = harness.start("serve")
        assert serve.url is not None
        key = harness.default_api_key(serve.url)
        host, port = serve.url.removeprefix("http://").split(":")
        slow = _Slowloris(host, int(port), SLOW_CLIENTS)
        try:
            started = time.monotonic()
            with httpx.Client(
                base_url=serve.url, headers={"Authorization": f"Bearer {key}"}, timeout=10
            ) as client:
                # Normal clients are served while the slow ones hold their connections.
                for n in range(20):
                    response = client.post(
                        "/v1/jobs",
                        json={
                            "endpoint": "/v1/chat/completions",
                            "body": {"model": "sim-echo", "messages": [
                                {"role": "user", "content": f"n{n}"}
                            ]},
                        },
                    )  # fmt: skip
                    assert response.status_code == 202
                    assert client.get("/healthz").status_code == 200
            # And the slow ones are cut off once the receipt bound passes.
            wait_until(
                lambda: slow.closed_by_server == SLOW_CLIENTS,
                timeout_s=30,
                what="the server to close every slow connection",
            )
            assert time.monotonic() - started >= RECEIPT_TIMEOUT_S * 0.9
        finally:
            slow.stop()
