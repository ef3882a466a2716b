"""The Redis broker of the transport tests: a stream of its own per test."""

from __future__ import annotations

import redis.asyncio as aioredis

from jobgate.transports.redis_streams import RedisStreamsTransport
from tests.transports.brokers import REDIS_URL, unique


class RedisBroker:
    name = "redis"

    def __init__(self) -> None:
        self.stream = unique("jobgate:test")
        self.group = unique("workers")
        self._clients: list[RedisStreamsTransport] = []

    def url(self) -> str:
        return f"{REDIS_URL}?stream={self.stream}"

    def transport(self, consumer: str, *, claim_idle_s: float) -> RedisStreamsTransport:
        client = RedisStreamsTransport(
            REDIS_URL,
            consumer=consumer,
            claim_idle_s=claim_idle_s,
            stream=self.stream,
            group=self.group,
            client_name=self.stream.replace(":", "-"),
        )
        self._clients.append(client)
        return client

    async def lose_everything(self) -> None:
        admin = aioredis.from_url(REDIS_URL)
        try:
            await admin.delete(self.stream)  # the stream and its group: like a FLUSHALL
        finally:
            await admin.aclose()

    async def publish_garbage(self) -> int:
        client = self.transport("garbage", claim_idle_s=60)
        await client.open()  # the stream and its group
        entries: list[dict[bytes, bytes]] = [
            {b"job": b"\xff\xfejob"},  # not UTF-8
            {b"task": b"job_1"},  # no job field
            {b"job": b"job_1\x00"},  # a NUL: PostgreSQL refuses it in a query
            {b"job": b""},
        ]
        admin = aioredis.from_url(REDIS_URL)
        try:
            for fields in entries:
                await admin.xadd(self.stream, fields)  # type: ignore[arg-type]
        finally:
            await admin.aclose()
        return len(entries)

    async def cut_connections(self) -> None:
        admin = aioredis.from_url(REDIS_URL)
        try:
            mine = self.stream.replace(":", "-")
            for client in await admin.client_list():
                if client.get("name") == mine:
                    await admin.client_kill_filter(_id=client["id"])
        finally:
            await admin.aclose()

    async def cleanup(self) -> None:
        for client in self._clients:
            await client.close()
        await self.lose_everything()
