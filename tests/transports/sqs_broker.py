"""The SQS broker of the transport tests: moto in server mode, a real HTTP server on 127.0.0.1
started once per test session as its own process; queues of their own per test."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import time

from aiobotocore.session import get_session

from jobgate.transports.sqs import SqsTransport
from tests.transports.brokers import unique

_server: subprocess.Popen[bytes] | None = None
_endpoint: str | None = None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def moto_endpoint() -> str:
    """Start moto's server (once) and answer its URL."""
    global _server, _endpoint
    if _endpoint is not None:
        return _endpoint
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(name, value)
    port = _free_port()
    _server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    atexit.register(stop_moto)  # also when the session ends without its hook
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            _endpoint = f"http://127.0.0.1:{port}"
            return _endpoint
        time.sleep(0.1)
    raise RuntimeError("moto's server did not start")


def stop_moto() -> None:
    global _server, _endpoint
    if _server is not None:
        _server.terminate()
        _server.wait(10)
    _server = _endpoint = None


class SqsBroker:
    name = "sqs"

    def __init__(self) -> None:
        self.endpoint = moto_endpoint()
        self.queue = unique("jobgate-test")
        self._clients: list[SqsTransport] = []

    def url(self) -> str:
        return f"sqs://{self.queue}?endpoint_url={self.endpoint}&region=us-east-1"

    def transport(self, consumer: str, *, claim_idle_s: float) -> SqsTransport:
        client = SqsTransport(self.url(), visibility_s=claim_idle_s)
        self._clients.append(client)
        return client

    async def lose_everything(self) -> None:
        async with get_session().create_client(
            "sqs", region_name="us-east-1", endpoint_url=self.endpoint
        ) as client:
            queue = await client.get_queue_url(QueueName=self.queue)
            await client.purge_queue(QueueUrl=queue["QueueUrl"])

    async def publish_garbage(self) -> int:
        client = self.transport("garbage", claim_idle_s=60)
        await client.open()  # the queue
        bodies = ["not a job", "job_" + "x" * 300, "job_1; DROP TABLE jobs"]
        async with get_session().create_client(
            "sqs", region_name="us-east-1", endpoint_url=self.endpoint
        ) as sqs:
            queue = await sqs.get_queue_url(QueueName=self.queue)
            for body in bodies:
                await sqs.send_message(QueueUrl=queue["QueueUrl"], MessageBody=body)
        return len(bodies)

    async def cut_connections(self) -> None:
        """HTTP: every call is its own request; closing the clients' pools is the cut."""
        for client in self._clients:
            await client.close()

    async def cleanup(self) -> None:
        for client in self._clients:
            await client.close()
