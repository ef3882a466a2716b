"""A RabbitMQ connection the transport lets go of is closed on the event loop: one whose set-up
failed (a declaration refused) and one the network cut (aio-pika leaves such a connection open
in its own eyes). Dropped open, aio-pika's `__del__` closed it from whichever thread the garbage
collector ran in, outside any loop: an un-awaited `Connection.close` coroutine, which failed a
transport test in CI."""

from __future__ import annotations

from typing import Any

import aio_pika
import pytest

from jobgate.testing import eventually
from jobgate.transports.amqp import AmqpTransport
from jobgate.transports.base import TransportUnavailable
from tests.transports.amqp_broker import AmqpBroker
from tests.transports.brokers import AMQP_URL, unique

pytestmark = pytest.mark.asyncio


def _opened_connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every connection aio_pika.connect opens from now on."""
    opened: list[Any] = []
    connect = aio_pika.connect

    async def recorded(*args: Any, **kwargs: Any) -> Any:
        connection = await connect(*args, **kwargs)
        opened.append(connection)
        return connection

    monkeypatch.setattr(aio_pika, "connect", recorded)
    return opened


async def test_a_connection_whose_set_up_failed_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = unique("jobgate.test.open")
    admin = await aio_pika.connect(AMQP_URL)
    try:
        channel = await admin.channel()
        # The transport declares a quorum queue; a classic one of the same name refuses it.
        await channel.declare_queue(queue, durable=True)
        opened = _opened_connections(monkeypatch)
        transport = AmqpTransport(AMQP_URL, consumer=f"{queue}/c", prefetch=1, queue=queue)
        with pytest.raises(TransportUnavailable):
            await transport.open()
        assert len(opened) == 1
        assert opened[0].is_closed
    finally:
        channel = await admin.channel()
        for name in (queue, f"{queue}.dead"):
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dlx")
        await admin.close()


async def test_a_connection_the_network_cut_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = AmqpBroker()  # its clients reach RabbitMQ through a proxy it can cut
    try:
        transport = broker.transport("c", claim_idle_s=1.0)
        opened = _opened_connections(monkeypatch)
        await transport.open()
        assert len(opened) == 1 and not opened[0].is_closed
        await broker.cut_connections()
        await eventually(lambda: opened[0].is_closed)
    finally:
        await broker.cleanup()
