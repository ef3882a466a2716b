"""RabbitMQ transport (aio-pika): a durable quorum queue, publisher confirms, manual acks after
the job's verdict committed, prefetch = the worker's slots, and a dead-letter exchange for a
message delivered too often (x-delivery-limit; the relay's sweep republishes its job if it is
still ready, with a fresh count).

Messages received but not yet taken by the worker wait unacked in a local inbox; with the
prefetch at the worker's concurrency, they never outnumber its free slots. Every delivery
handed out stays counted against that credit until it is acked or released (nacked with
requeue): one lost on the way holds a slot of the prefetch for as long as the connection
lives, which is why `outstanding` lists them. A lost connection drops the inbox and those
counts (the broker requeues the messages) and the next call reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import aio_pika
from aio_pika import exceptions as amqp_errors
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue

from jobgate.transports.base import Delivery, TransportUnavailable

QUEUE = "jobgate.ready"
DELIVERY_LIMIT = 20  # deliveries of one message before it is dead-lettered
_ERRORS = (amqp_errors.AMQPError, ConnectionError, OSError, TimeoutError, RuntimeError)


def _job_id(message: AbstractIncomingMessage) -> str:
    """The job id a message names; empty when its body is not UTF-8 (garbage: acked as such)."""
    try:
        return message.body.decode()
    except UnicodeDecodeError:
        return ""


def _deliveries(message: AbstractIncomingMessage) -> int:
    """How often the broker delivered this message (quorum queues count redeliveries)."""
    count = (message.headers or {}).get("x-delivery-count")
    if isinstance(count, int):
        return count + 1
    return 2 if message.redelivered else 1


class AmqpTransport:
    name = "amqp"

    def __init__(
        self,
        url: str,
        *,
        consumer: str,
        prefetch: int,
        queue: str = QUEUE,
        delivery_limit: int = DELIVERY_LIMIT,
    ) -> None:
        self._url = url
        self._consumer = consumer
        self._prefetch = prefetch
        self._queue_name = queue
        self._dlx = f"{queue}.dlx"
        self._dlq = f"{queue}.dead"
        self._delivery_limit = delivery_limit
        self._connection: AbstractConnection | None = None
        self._publish_channel: AbstractChannel | None = None
        self._queue: AbstractQueue | None = None
        self._consuming = False
        self._inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        # Handed out by receive, neither acked nor released, by message (on this connection).
        self._unsettled: dict[int, Delivery] = {}
        self._opening = asyncio.Lock()  # the worker and the relay of a process share it
        self._closing: set[asyncio.Task[None]] = set()  # connections that ended, being closed

    def _queue_arguments(self) -> dict[str, Any]:
        return {
            "x-queue-type": "quorum",
            "x-delivery-limit": self._delivery_limit,
            "x-dead-letter-exchange": self._dlx,
        }

    def _lost(self, *_args: object) -> None:
        self._connection = self._publish_channel = self._queue = None
        self._consuming = False
        self._inbox = asyncio.Queue()  # unacked: the broker requeues them
        self._unsettled = {}

    def _ended(self, connection: object, *_args: object) -> None:
        """A connection's close callback. One the broker or the network ended stays open in
        aio-pika's eyes (its close was never called): it is closed here, on the event loop, as
        its own task (not inside the callback that runs its closing). Dropped open, aio-pika's
        `__del__` would close it from whichever thread the garbage collector ran in, outside
        any loop: an un-awaited coroutine."""
        if connection is self._connection:
            self._lost()
        if isinstance(connection, AbstractConnection) and not connection.is_closed:
            task = asyncio.get_running_loop().create_task(_close_quietly(connection))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def open(self) -> None:
        async with self._opening:
            await self._open()

    async def _open(self) -> None:
        if self._connection is not None and not self._connection.is_closed:
            return
        connection: AbstractConnection | None = None
        opened = False
        try:
            connection = await aio_pika.connect(
                self._url, timeout=5, client_properties={"connection_name": self._consumer}
            )
            connection.close_callbacks.add(self._ended)
            # Confirmed, and refused when unroutable (the queue was deleted): then reconnect,
            # which declares it again, and publish once more.
            publish_channel = await connection.channel(
                publisher_confirms=True, on_return_raises=True
            )
            consume_channel = await connection.channel(publisher_confirms=False)
            await consume_channel.set_qos(prefetch_count=self._prefetch)
            dlx = await publish_channel.declare_exchange(
                self._dlx, aio_pika.ExchangeType.FANOUT, durable=True
            )
            dead = await publish_channel.declare_queue(
                self._dlq, durable=True, arguments={"x-queue-type": "quorum"}
            )
            await dead.bind(dlx)
            queue = await consume_channel.declare_queue(
                self._queue_name, durable=True, arguments=self._queue_arguments()
            )
            opened = True
        except _ERRORS as exc:
            raise TransportUnavailable(f"amqp: {type(exc).__name__}: {exc}") from exc
        finally:
            # A connection left half open (the broker cut it, or a declaration failed) is closed
            # here: dropped open, aio-pika's __del__ would close it from whichever thread the
            # garbage collector ran in, outside any event loop (an un-awaited coroutine).
            if not opened and connection is not None:
                await _close_quietly(connection)
        self._connection, self._publish_channel, self._queue = connection, publish_channel, queue

    async def close(self) -> None:
        connection = self._connection
        self._lost()
        if connection is not None:
            await _close_quietly(connection)

    async def publish(self, job_ids: Sequence[str]) -> None:
        await self.open()
        channel = self._publish_channel
        assert channel is not None
        try:
            # Each publish answers once the broker confirmed it (publisher confirms).
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(
                            job_id.encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                        ),
                        routing_key=self._queue_name,
                    )
                    for job_id in job_ids
                )
            )
        except amqp_errors.DeliveryError as exc:
            await self.close()
            raise TransportUnavailable(f"amqp: unroutable: {exc}") from exc
        except _ERRORS as exc:
            raise TransportUnavailable(f"amqp: {type(exc).__name__}: {exc}") from exc

    async def _received(self, message: AbstractIncomingMessage) -> None:
        self._inbox.put_nowait(message)

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivery]:
        await self.open()
        if not self._consuming:
            assert self._queue is not None
            try:
                await self._queue.consume(self._received)
            except _ERRORS as exc:
                raise TransportUnavailable(f"amqp: {type(exc).__name__}: {exc}") from exc
            self._consuming = True
        inbox = self._inbox
        messages: list[AbstractIncomingMessage] = []
        if inbox.empty():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    messages.append(await inbox.get())
        while len(messages) < max_count and not inbox.empty():
            messages.append(inbox.get_nowait())
        deliveries = [Delivery(_job_id(m), _deliveries(m), m) for m in messages]
        if inbox is self._inbox:  # not from a connection lost meanwhile
            self._unsettled.update((id(d.handle), d) for d in deliveries)
        return deliveries

    def _settling(self, deliveries: Sequence[Delivery]) -> list[AbstractIncomingMessage]:
        """The deliveries' messages, no longer counted as unsettled (from now: their ack or
        nack is under way, or their connection is gone)."""
        messages = []
        for delivery in deliveries:
            message = delivery.handle
            assert isinstance(message, AbstractIncomingMessage)
            self._unsettled.pop(id(message), None)
            messages.append(message)
        return messages

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        try:
            for message in self._settling(deliveries):
                await message.ack()
        except _ERRORS as exc:  # the channel is gone: the broker requeued them (harmless)
            raise TransportUnavailable(f"amqp: {type(exc).__name__}: {exc}") from exc

    async def release(self, deliveries: Sequence[Delivery]) -> None:
        try:
            for message in self._settling(deliveries):
                await message.nack(requeue=True)
        except _ERRORS as exc:  # the channel is gone: the broker requeued them anyway
            raise TransportUnavailable(f"amqp: {type(exc).__name__}: {exc}") from exc

    def credit(self) -> int:
        if not self._consuming:
            return self._prefetch  # a new consumer starts with all of it
        return max(0, self._prefetch - self._inbox.qsize() - len(self._unsettled))

    def outstanding(self) -> list[Delivery]:
        return list(self._unsettled.values())

    async def extend(self, deliveries: Sequence[Delivery], *, visibility_s: float) -> None:
        """Nothing to do: RabbitMQ redelivers only when the consumer's channel closes (or
        after its consumer_timeout, 30 min by default; raise it above the longest call)."""

    async def lag(self) -> int:
        await self.open()
        channel = self._publish_channel
        assert channel is not None
        try:
            queue = await channel.declare_queue(
                self._queue_name, durable=True, arguments=self._queue_arguments()
            )
        except _ERRORS as exc:
            raise TransportUnavailable(f"amqp: {type(exc).__name__}: {exc}") from exc
        return int(queue.declaration_result.message_count or 0)


async def _close_quietly(connection: AbstractConnection) -> None:
    with contextlib.suppress(*_ERRORS):
        await connection.close()
