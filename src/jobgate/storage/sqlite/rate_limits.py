"""RateLimitStore on SQLite: bucket rows read and written inside the single writer."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from jobgate.domain.job import Job, Lease
from jobgate.domain.rate_limits import Bucket, BucketState
from jobgate.storage import sql
from jobgate.storage.rate_limits_base import Change, RateLimitBase
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


def _states(conn: sqlite3.Connection, buckets: list[Bucket]) -> list[tuple[Bucket, BucketState]]:
    held = []
    for bucket in buckets:
        key = {"provider": bucket.provider, "model": bucket.model}
        row = conn.execute(Q["rate_limit_get"].sql, key).fetchone()
        state = BucketState() if row is None else BucketState(row["requests_at"], row["tokens_at"])
        held.append((bucket, state))
    return held


class SqliteRateLimits(RateLimitBase):
    """Mixed into SqliteStorage, which supplies `_db` and `_now`."""

    _db: SqliteDatabase

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def _buckets_locked(
        self, buckets: list[Bucket], now: datetime | None, change: Change
    ) -> float:
        at = self._now(now)

        def locked(conn: sqlite3.Connection) -> float:
            held = _states(conn, buckets)
            states, answer = change(held, at)
            if states is not None:
                for bucket, state in zip(buckets, states, strict=True):
                    key = {"provider": bucket.provider, "model": bucket.model}
                    conn.execute(Q["rate_limit_ensure"].sql, key)
                    conn.execute(
                        Q["rate_limit_write"].sql,
                        {**key, "requests_at": state.requests_at, "tokens_at": state.tokens_at},
                    )
            return answer

        return await self._db.write(locked)

    async def _buckets_read(
        self, buckets: list[Bucket], now: datetime | None
    ) -> tuple[list[tuple[Bucket, BucketState]], float]:
        at = self._now(now)
        held = await self._db.read(lambda conn: _states(conn, buckets))
        return held, at

    async def rate_limited_queued(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], int]:
        waits = await self.rate_limit_waits(buckets=buckets, now=now)
        closed = [b for b in buckets if (b.provider, b.model) in waits]
        at = self._now(now)

        def count(conn: sqlite3.Connection) -> dict[tuple[str, str], int]:
            found = {}
            for b in closed:
                params = {"provider": b.provider, "model": b.model, "now": at}
                found[(b.provider, b.model)] = conn.execute(
                    Q["rate_limited_queued"].sql, params
                ).fetchone()["queued"]
            return found

        return await self._db.read(count) if closed else {}

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
        at = self._now(now)
        params: dict[str, object] = {"id": lease.job_id, "token": lease.token, "now": at}
        params.update(provider=provider, model=model)

        def move(conn: sqlite3.Connection) -> bool:
            row = conn.execute(Q["job_reroute"].sql, params).fetchone()
            if row is None:
                return False
            event = {"id": lease.job_id, "seq": row["event_seq"], "actor": actor}
            conn.execute(Q["job_reroute_event"].sql, {**event, "reason": reason, "now": at})
            return True

        return await self._db.write(move)

    async def job_queue_position(self, *, job: Job, now: datetime | None = None) -> int:
        params = {"tenant_id": job.tenant_id, "priority": job.priority, "id": job.id}
        params.update(run_at=job.run_at.timestamp(), now=self._now(now))
        row = await self._db.read(
            lambda conn: conn.execute(Q["job_queue_position"].sql, params).fetchone()
        )
        return int(row["position"])

    async def breaker_open(
        self, *, provider: str, open_s: float, opened_by: str, now: datetime | None = None
    ) -> None:
        params = {"provider": provider, "open_until": self._now(now) + open_s}
        params["opened_by"] = opened_by
        await self._db.write(lambda conn: conn.execute(Q["breaker_open"].sql, params))

    async def breaker_close(self, *, provider: str) -> None:
        params = {"provider": provider}
        await self._db.write(lambda conn: conn.execute(Q["breaker_close"].sql, params))

    async def breaker_states(self, *, now: datetime | None = None) -> dict[str, float]:
        at = self._now(now)
        rows = await self._db.read(lambda conn: conn.execute(Q["breaker_states"].sql).fetchall())
        return {row["provider"]: row["open_until"] - at for row in rows}
