"""RateLimitStore's bucket changes on PostgreSQL: the rows are created if missing, locked FOR
UPDATE in (provider, model) order, changed and written in one short transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate.domain.rate_limits import Bucket
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.store.rate_limits import A, Change, RateLimitQueries, held_states


def _keys(buckets: Sequence[Bucket]) -> dict[str, list[str]]:
    return {"providers": [b.provider for b in buckets], "models": [b.model for b in buckets]}


class PostgresRateLimits(RateLimitQueries):
    _sql: PostgresExecutor

    async def _buckets_locked(
        self, buckets: list[Bucket], now: datetime | None, change: Change[A]
    ) -> A:
        keys = _keys(buckets)
        fetch = self._sql.fetch

        async def locked(conn: Conn) -> A:
            await fetch(conn, "rate_limit_ensure", **keys)
            (clock,) = await fetch(conn, "rate_limit_now", now=now)
            rows = await fetch(conn, "rate_limit_lock", **keys)
            states, answer = change(held_states(buckets, rows), clock["now"])
            if states is not None:
                await fetch(
                    conn,
                    "rate_limit_write",
                    **keys,
                    requests_at=[s.requests_at for s in states],
                    tokens_at=[s.tokens_at for s in states],
                )
            return answer

        return await self._sql.run(locked, transaction=True)
