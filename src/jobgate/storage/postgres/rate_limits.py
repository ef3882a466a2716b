"""RateLimitStore on PostgreSQL: bucket rows locked FOR UPDATE in one short transaction."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from jobgate.domain.job import Job, Lease
from jobgate.domain.rate_limits import Bucket, BucketState
from jobgate.storage.rate_limits_base import Change, RateLimitBase

T = TypeVar("T")


def _keys(buckets: Sequence[Bucket]) -> dict[str, list[str]]:
    return {"providers": [b.provider for b in buckets], "models": [b.model for b in buckets]}


def _states(
    buckets: list[Bucket], rows: Sequence[asyncpg.Record]
) -> list[tuple[Bucket, BucketState]]:
    found = {(r["provider"], r["model"]): r for r in rows}
    held = []
    for bucket in buckets:
        row = found.get((bucket.provider, bucket.model))
        state = BucketState() if row is None else BucketState(row["requests_at"], row["tokens_at"])
        held.append((bucket, state))
    return held


class PostgresRateLimits(RateLimitBase):
    """Mixed into PostgresStorage, which supplies the query helpers."""

    async def _with_conn(
        self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        raise NotImplementedError

    @staticmethod
    async def _run(conn: Any, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def _buckets_locked(
        self, buckets: list[Bucket], now: datetime | None, change: Change
    ) -> float:
        keys = _keys(buckets)

        async def locked(conn: Any) -> float:
            await self._run(conn, "rate_limit_ensure", **keys)
            (clock,) = await self._run(conn, "rate_limit_now", now=now)
            rows = await self._run(conn, "rate_limit_lock", **keys)
            states, answer = change(_states(buckets, rows), clock["now"])
            if states is not None:
                await self._run(
                    conn,
                    "rate_limit_write",
                    **keys,
                    requests_at=[s.requests_at for s in states],
                    tokens_at=[s.tokens_at for s in states],
                )
            return answer

        return await self._with_conn(locked, transaction=True)

    async def _buckets_read(
        self, buckets: list[Bucket], now: datetime | None
    ) -> tuple[list[tuple[Bucket, BucketState]], float]:
        async def read(conn: Any) -> tuple[list[tuple[Bucket, BucketState]], float]:
            (clock,) = await self._run(conn, "rate_limit_now", now=now)
            rows = await self._run(conn, "rate_limit_read", **_keys(buckets))
            return _states(buckets, rows), clock["now"]

        return await self._with_conn(read)

    async def rate_limited_queued(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], int]:
        waits = await self.rate_limit_waits(buckets=buckets, now=now)
        closed = [b for b in buckets if (b.provider, b.model) in waits]
        if not closed:
            return {}

        async def count(conn: Any) -> list[asyncpg.Record]:
            return await self._run(conn, "rate_limited_queued", **_keys(closed), now=now)

        rows = await self._with_conn(count)
        return {(r["provider"], r["model"]): r["queued"] for r in rows}

    async def job_reroute(
        self,
        *,
        lease: Lease,
        provider: str,
        model: str,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> bool:
        async def move(conn: Any) -> bool:
            rows = await self._run(
                conn,
                "job_reroute",
                id=lease.job_id,
                token=lease.token,
                provider=provider,
                model=model,
                actor=actor,
                reason=reason,
                now=now,
            )
            return bool(rows)

        return await self._with_conn(move)

    async def job_queue_position(self, *, job: Job, now: datetime | None = None) -> int:
        params = {"tenant_id": job.tenant_id, "priority": job.priority, "run_at": job.run_at}

        async def count(conn: Any) -> int:
            (row,) = await self._run(conn, "job_queue_position", **params, id=job.id, now=now)
            return int(row["position"])

        return await self._with_conn(count)

    async def breaker_open(
        self, *, provider: str, open_s: float, opened_by: str, now: datetime | None = None
    ) -> None:
        async def write(conn: Any) -> None:
            await self._run(
                conn, "breaker_open", provider=provider, open_s=open_s, opened_by=opened_by, now=now
            )

        await self._with_conn(write)

    async def breaker_close(self, *, provider: str) -> None:
        async def write(conn: Any) -> None:
            await self._run(conn, "breaker_close", provider=provider)

        await self._with_conn(write)

    async def breaker_states(self, *, now: datetime | None = None) -> dict[str, float]:
        async def read(conn: Any) -> list[asyncpg.Record]:
            return await self._run(conn, "breaker_states", now=now)

        return {r["provider"]: float(r["left_s"]) for r in await self._with_conn(read)}
