"""Real brokers for the transport tests: each test gets its own stream or queue names on the
shared server (Redis 127.0.0.1:6379, RabbitMQ 127.0.0.1:5672, an SQS server of moto started on
127.0.0.1 by the tests), and a way to make the broker lose everything it holds."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from typing import Protocol

import pytest

from jobgate.transports.base import Transport

REQUIRE_BROKERS = os.environ.get("JOBGATE_TEST_REQUIRE_BROKERS") == "1"
REDIS_URL = os.environ.get("JOBGATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("JOBGATE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require(name: str, host: str, port: int) -> None:
    """Skip when the broker is not running, unless JOBGATE_TEST_REQUIRE_BROKERS=1 (CI)."""
    if reachable(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}"
    if REQUIRE_BROKERS:
        pytest.fail(message + " and JOBGATE_TEST_REQUIRE_BROKERS=1")
    pytest.skip(message)


class Broker(Protocol):
    name: str

    def url(self) -> str:
        """JOBGATE_TRANSPORT for a jobgate process on this test's names."""
        ...

    def transport(self, consumer: str, *, claim_idle_s: float) -> Transport:
        """A new client (one per worker process it stands for) on this test's names."""
        ...

    async def lose_everything(self) -> None:
        """What a flush or a restart without persistence does: every message is gone."""
        ...

    async def cut_connections(self) -> None:
        """Break the clients' connections (a broker restart, a network cut)."""
        ...

    async def publish_garbage(self) -> int:
        """Put messages that name no job on this test's stream or queue, as anyone with access
        to the broker could (bytes that are not UTF-8, a NUL, no job at all); their number."""
        ...

    async def cleanup(self) -> None: ...


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


BrokerFactory = Callable[[], Broker]


def open_broker(name: str) -> Broker:
    """A broker of stream or queue names of its own: "redis", "amqp" or "sqs" (skipped when
    the server is not running, unless JOBGATE_TEST_REQUIRE_BROKERS=1)."""
    if name == "redis":
        require("Redis", "127.0.0.1", 6379)
        from tests.transports.redis_broker import RedisBroker

        return RedisBroker()
    if name == "amqp":
        require("RabbitMQ", "127.0.0.1", 5672)
        from tests.transports.amqp_broker import AmqpBroker

        return AmqpBroker()
    from tests.transports.sqs_broker import SqsBroker

    return SqsBroker()
