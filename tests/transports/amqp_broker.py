"""The RabbitMQ broker of the transport tests: queues of their own per test; connections are
cut with rabbitmqctl (no management plugin here), only this test's."""

from __future__ import annotations

import asyncio
import contextlib

import aio_pika

from jobgate.transports.amqp import AmqpTransport
from tests.transports.brokers import AMQP_URL, unique


class AmqpBroker:
    name = "amqp"

    def __init__(self) -> None:
        self.queue = unique("jobgate.test")
        self._clients: list[AmqpTransport] = []

    def url(self) -> str:
        return f"{AMQP_URL}?queue={self.queue}"

    def transport(self, consumer: str, *, claim_idle_s: float) -> AmqpTransport:
        client = AmqpTransport(
            AMQP_URL, consumer=f"{self.queue}/{consumer}", prefetch=8, queue=self.queue
        )
        self._clients.append(client)
        return client

    async def lose_everything(self) -> None:
        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            queue = await channel.get_queue(self.queue, ensure=True)
            await queue.purge()

    async def cut_connections(self) -> None:
        listing = await asyncio.create_subprocess_exec(
            "rabbitmqctl", "list_connections", "-q", "--no-table-headers", "pid",
            "client_properties",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        out, _ = await listing.communicate()
        for line in out.decode().splitlines():
            if self.queue in line:
                pid = line.split("\t", 1)[0]
                closing = await asyncio.create_subprocess_exec(
                    "rabbitmqctl", "close_connection", pid, "test: connection cut",
                    stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
                )  # fmt: skip
                await closing.wait()

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
