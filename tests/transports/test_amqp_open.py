"""A RabbitMQ connection opened by a transport whose set-up then fails (a declaration refused,
or the connection cut mid-way) is closed at once, on the event loop. Dropped open, aio-pika's
`__del__` closed it from whichever thread the garbage collector ran in, outside any loop: an
un-awaited `Connection.close` coroutine, which failed a transport test in CI."""

from __future__ import annotations

from typing import Any

import aio_pika
import pytest

from jobgate.transports.amqp import AmqpTransport
from jobgate.transports.base import TransportUnavailable
from tests.transports.brokers import AMQP_URL, unique

pytestmark = pytest.mark.asyncio


async def test_a_connection_whose_set_up_failed_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = unique("jobgate.test.open")
    admin = await aio_pika.connect(AMQP_URL)
    try:
        channel = await admin.channel()
        # The transport declares a quorum queue; a classic one of the same name refuses it.
        await channel.declare_queue(queue, durable=True)
        opened: list[Any] = []
        connect = aio_pika.connect

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            connection = await connect(*args, **kwargs)
            opened.append(connection)
            return connection

        monkeypatch.setattr(aio_pika, "connect", recorded)
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
