"""Redis Streams transport: one stream, one consumer group of every worker, XREADGROUP with
blocking, XAUTOCLAIM for the entries of consumers that died, XACK (and XDEL) once the job's
verdict committed, approximate MAXLEN trimming as a bound.

A Redis that restarts without persistence, or a FLUSHALL, loses the stream and the group: the
next read recreates both, and the relay's sweep republishes the jobs whose messages were lost.

Replies are read as bytes and decoded here: anyone with access to the stream can add any entry,
and one that is not UTF-8 must become a delivery of no job (acked as garbage), not an error
inside the client's parser on every read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from jobgate.transports.base import Delivery, TransportUnavailable

STREAM = "jobgate:ready"
GROUP = "jobgate-workers"
MAXLEN = 1_000_000  # a bound on the stream; trimmed entries are found again by the sweep
_UNAVAILABLE = (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _delivery(entry_id: bytes | str, fields: dict[bytes, bytes] | None, count: int) -> Delivery:
    """One stream entry as a delivery. Its job id is empty when the entry holds none in UTF-8:
    garbage, or an entry deleted or trimmed while pending (its fields come back empty)."""
    raw = (fields or {}).get(b"job", b"")
    try:
        job_id = raw.decode()
    except UnicodeDecodeError:
        job_id = ""
    return Delivery(job_id, count, _text(entry_id))


class RedisStreamsTransport:
    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        consumer: str,
        claim_idle_s: float,
        stream: str = STREAM,
        group: str = GROUP,
        maxlen: int = MAXLEN,
        client_name: str = "jobgate",
    ) -> None:
        self._url = url
        self._consumer = consumer
        self._claim_idle_ms = max(1, int(claim_idle_s * 1000))
        self._stream = stream
        self._group = group
        self._maxlen = maxlen
        self._client_name = client_name
        self._redis: aioredis.Redis | None = None
        self._autoclaim_cursor = "0-0"

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            self._redis = aioredis.from_url(
                self._url,
                decode_responses=False,  # decoded here, entry by entry (the docstring)
                socket_connect_timeout=2,
                socket_timeout=10,  # above any blocking read (at most a second)
                retry_on_timeout=False,
                client_name=self._client_name,
            )
        return self._redis

    async def _ensure_group(self) -> None:
        try:
            await self._client().xgroup_create(self._stream, self._group, id="0", mkstream=True)
        except redis_errors.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _call(self, operation: Any) -> Any:
        """Run `operation()`; recreate a group that vanished (FLUSHALL, a restart without
        persistence) and try once more; translate connection errors."""
        try:
            try:
                return await operation()
            except redis_errors.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                await self._ensure_group()
                return await operation()
        except _UNAVAILABLE as exc:
            raise TransportUnavailable(f"redis: {type(exc).__name__}: {exc}") from exc
        except redis_errors.RedisError as exc:
            raise TransportUnavailable(f"redis: {type(exc).__name__}: {exc}") from exc

    async def open(self) -> None:
        await self._call(self._ensure_group)

    async def close(self) -> None:
        if self._redis is not None:
            redis, self._redis = self._redis, None
            await redis.aclose()

    async def publish(self, job_ids: Sequence[str]) -> None:
        async def publish() -> None:
            pipe = self._client().pipeline(transaction=False)
            for job_id in job_ids:
                pipe.xadd(self._stream, {"job": job_id}, maxlen=self._maxlen, approximate=True)
            await pipe.execute()

        await self._call(publish)

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivery]:
        client = self._client()

        async def autoclaim() -> list[Any]:
            # Entries pending longer than a lease with no heartbeat (XCLAIM JUSTID resets the
            # idle time of the entries of live consumers): their consumer died.
            answer = await client.xautoclaim(
                self._stream,
                self._group,
                self._consumer,
                min_idle_time=self._claim_idle_ms,
                start_id=self._autoclaim_cursor,
                count=max_count,
            )
            self._autoclaim_cursor = _text(answer[0])
            return list(answer[1])

        stolen = await self._call(autoclaim)
        deliveries = [_delivery(entry_id, fields, 2) for entry_id, fields in stolen]
        if len(deliveries) >= max_count:
            return deliveries

        async def read() -> Any:
            return await client.xreadgroup(
                self._group,
                self._consumer,
                {self._stream: ">"},
                count=max_count - len(deliveries),
                block=max(1, int(wait_s * 1000)) if not deliveries else None,
            )

        answer = await self._call(read)
        for _stream, entries in answer or []:
            deliveries += [_delivery(entry_id, fields, 1) for entry_id, fields in entries]
        return deliveries

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        ids = [str(d.handle) for d in deliveries]
        if not ids:
            return

        async def ack() -> None:
            pipe = self._client().pipeline(transaction=True)
            pipe.xack(self._stream, self._group, *ids)
            pipe.xdel(self._stream, *ids)  # the stream holds only what is not done
            await pipe.execute()

        await self._call(ack)

    async def release(self, deliveries: Sequence[Delivery]) -> None:
        ids: list[int | bytes | str | memoryview[int]] = [str(d.handle) for d in deliveries]
        if not ids:
            return

        async def idle() -> None:
            # Idle as long as XAUTOCLAIM asks: the next receive (any consumer's) takes them.
            await self._client().xclaim(
                self._stream, self._group, self._consumer, min_idle_time=0,
                message_ids=ids, idle=self._claim_idle_ms, justid=True,
            )  # fmt: skip

        await self._call(idle)
        self._autoclaim_cursor = "0-0"  # this consumer's next scan starts before them

    def credit(self) -> None:
        return None  # XREADGROUP hands out whatever waits, however much is pending

    def outstanding(self) -> list[Delivery]:
        return []

    async def extend(self, deliveries: Sequence[Delivery], *, visibility_s: float) -> None:
        ids: list[int | bytes | str | memoryview[int]] = [str(d.handle) for d in deliveries]
        if not ids:
            return

        async def touch() -> None:
            await self._client().xclaim(
                self._stream, self._group, self._consumer, min_idle_time=0,
                message_ids=ids, justid=True,
            )  # fmt: skip

        await self._call(touch)

    async def lag(self) -> int:
        async def length() -> int:
            return int(await self._client().xlen(self._stream))

        return int(await self._call(length))
