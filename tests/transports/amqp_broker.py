"""The RabbitMQ broker of the transport tests: queues of their own per test. The test's clients
reach RabbitMQ through a TCP proxy of their own, so a cut resets only this test's connections,
at once. (It was `rabbitmqctl close_connection`, one Erlang VM per connection plus one to list
them: 11-13 s under load, by which time the run it was meant to interrupt had ended.)"""

from __future__ import annotations

import contextlib
import urllib.parse

import aio_pika

from jobgate.transports.amqp import AmqpTransport
from tests.support.proxy import TcpProxy
from tests.transports.brokers import AMQP_URL, unique


class AmqpBroker:
    name = "amqp"

    def __init__(self) -> None:
        self.queue = unique("jobgate.test")
        self._clients: list[AmqpTransport] = []
        self._proxy: TcpProxy | None = None  # started with the first client

    def url(self) -> str:
        return f"{AMQP_URL}?queue={self.queue}"

    def _client_url(self) -> str:
        parts = urllib.parse.urlsplit(AMQP_URL)
        if self._proxy is None:
            self._proxy = TcpProxy((parts.hostname or "127.0.0.1", parts.port or 5672)).start()
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (f"{userinfo}@" if userinfo else "") + f"127.0.0.1:{self._proxy.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def transport(self, consumer: str, *, claim_idle_s: float) -> AmqpTransport:
        client = AmqpTransport(
            self._client_url(), consumer=f"{self.queue}/{consumer}", prefetch=8, queue=self.queue
        )
        self._clients.append(client)
        return client

    async def lose_everything(self) -> None:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            queue = await channel.get_queue(self.queue, ensure=True)
            await queue.purge()

    async def publish_garbage(self) -> int:
        client = self.transport("garbage", claim_idle_s=60)
        await client.open()  # the queue, with its arguments
        bodies = [b"\xff\xfejob", b"job_1\x00", b""]
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            for body in bodies:
                await channel.default_exchange.publish(
                    aio_pika.Message(body), routing_key=self.queue
                )
        return len(bodies)

    async def cut_connections(self) -> None:
        """Reset every connection of this test's clients (a network cut); they reconnect."""
        if self._proxy is not None:
            self._proxy.reset()
            self._proxy.heal()

    async def cleanup(self) -> None:
        for client in self._clients:
            await client.close()
        with contextlib.suppress(Exception):
            connection = await aio_pika.connect(AMQP_URL)
            async with connection:
                channel = await connection.channel()
                for name in (self.queue, f"{self.queue}.dead"):
                    await channel.queue_delete(name)
                await channel.exchange_delete(f"{self.queue}.dlx")
        if self._proxy is not None:
            self._proxy.close()
