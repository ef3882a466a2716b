"""The soak's transport and the broker faults it injects: `database` (none), `redis` (a private
redis-server on a free port, crash-restarted), `amqp` (the shared RabbitMQ behind a TCP proxy
whose connections are cut; the server itself is never touched) and `sqs` (moto in server mode,
behind a proxy whose connections are cut). Each broker names its own queue or stream, and is
cleaned up at the end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

from tests.support.processes import free_port
from tests.support.proxy import TcpProxy

TRANSPORTS = ("database", "redis", "amqp", "sqs")
AMQP_HOST = ("127.0.0.1", 5672)
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class Broker(Protocol):
    name: str

    def env(self) -> dict[str, str]:
        """What every jobgate process needs to use it (JOBGATE_TRANSPORT and credentials)."""
        ...

    def fault(self, outage_s: float) -> str | None:
        """Inject one fault lasting about `outage_s` (blocks that long); what was done, or
        None when this transport has no broker."""
        ...

    def close(self) -> None: ...


def open_broker(name: str, directory: Path) -> Broker:
    if name == "redis":
        return RedisBroker(directory)
    if name == "amqp":
        return AmqpBroker()
    if name == "sqs":
        return SqsBroker(directory)
    return NoBroker()


def _wait_port(port: int, *, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


class NoBroker:
    name = "database"

    def env(self) -> dict[str, str]:
        return {}

    def fault(self, outage_s: float) -> str | None:
        return None

    def close(self) -> None:
        pass


class RedisBroker:
    """A redis-server of the soak's own (append-only file, fsync every second), so that a crash
    loses about a second of what it held, as a real one would."""

    name = "redis"

    def __init__(self, directory: Path) -> None:
        self.directory = directory / "redis"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._start()

    def _start(self) -> None:
        with open(self.directory / "redis.log", "ab") as log:
            self.process = subprocess.Popen(
                [
                    "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                    "--dir", str(self.directory), "--save", "", "--appendonly", "yes",
                    "--appendfsync", "everysec", "--protected-mode", "no",
                ],
                stdout=log,
                stderr=log,
                start_new_session=True,
            )  # fmt: skip
        _wait_port(self.port)

    def env(self) -> dict[str, str]:
        return {"JOBGATE_TRANSPORT": f"redis://127.0.0.1:{self.port}/0?stream=soak:ready"}

    def fault(self, outage_s: float) -> str:
        """kill -9 the server, keep it down for `outage_s`, start it again on its port."""
        self._kill()
        time.sleep(outage_s)
        self._start()
        self.restarts += 1
        return f"redis-server kill -9, restarted after {outage_s:.0f} s"

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def close(self) -> None:
        self._kill()


class AmqpBroker:
    """The shared RabbitMQ, reached through a proxy of the soak's own: a fault resets every
    connection of the soak's processes (and refuses new ones for the outage), never anyone
    else's, and the server is never restarted."""

    name = "amqp"

    def __init__(self) -> None:
        self.queue = f"soak.{secrets.token_hex(4)}"
        self.proxy = TcpProxy(AMQP_HOST).start()

    def env(self) -> dict[str, str]:
        return {
            "JOBGATE_TRANSPORT": f"amqp://guest:guest@127.0.0.1:{self.proxy.port}/"
            f"?queue={self.queue}"
        }

    def fault(self, outage_s: float) -> str:
        self.proxy.refuse()  # every connection reset, new ones refused
        time.sleep(outage_s)
        self.proxy.heal()
        return f"RabbitMQ connections cut for {outage_s:.0f} s"

    def close(self) -> None:
        self.proxy.close()
        with contextlib.suppress(Exception):
            asyncio.run(self._delete())

    async def _delete(self) -> None:
        import aio_pika

        connection = await aio_pika.connect(f"amqp://guest:guest@{AMQP_HOST[0]}:{AMQP_HOST[1]}/")
        async with connection:
            channel = await connection.channel()
            for name in (self.queue, f"{self.queue}.dead"):
                with contextlib.suppress(Exception):
                    await channel.queue_delete(name)
            with contextlib.suppress(Exception):
                await channel.exchange_delete(f"{self.queue}.dlx")


def _as_a_service() -> None:
    """Run at the machine's normal priority, as the system's RabbitMQ and PostgreSQL do, not
    at the soak's `nice`: SQS stands in for a managed service, and moto, in Python and scanning
    its queue on each receive, is the slowest broker here (left as it is without the right)."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)


class SqsBroker:
    """moto's SQS server, started by the soak, reached through a proxy that a fault cuts."""

    name = "sqs"

    def __init__(self, directory: Path) -> None:
        self.queue = f"soak-{secrets.token_hex(4)}"
        self.port = free_port()
        log = open(directory / "moto.log", "ab")  # open as long as the server runs
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=log,
            env={**os.environ, **AWS_ENV},
            start_new_session=True,
            preexec_fn=_as_a_service,
        )
        self._log = log
        _wait_port(self.port)
        self.proxy = TcpProxy(("127.0.0.1", self.port)).start()

    def env(self) -> dict[str, str]:
        endpoint = f"http://127.0.0.1:{self.proxy.port}"
        return {
            "JOBGATE_TRANSPORT": f"sqs://{self.queue}?endpoint_url={endpoint}&region=us-east-1",
            **AWS_ENV,
        }

    def fault(self, outage_s: float) -> str:
        self.proxy.refuse()
        time.sleep(outage_s)
        self.proxy.heal()
        return f"SQS connections cut for {outage_s:.0f} s"

    def close(self) -> None:
        self.proxy.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
