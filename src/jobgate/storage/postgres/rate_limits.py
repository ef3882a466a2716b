"""The rate limits' transactions on PostgreSQL (part of Transactions): the rows are created if
missing, locked FOR UPDATE in (provider, model) order, changed and written in one short
transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate.domain.rate_limits import Bucket
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.store.rate_limits import held_states
from jobgate.storage.transaction_requests import (
    A,
    BucketChange,
    Change,
    KeyPurgeWrite,
    Reroute,
    record_params,
)


def _keys(buckets: Sequence[Bucket]) -> dict[str, list[str]]:
    return {"providers": [b.provider for b in buckets], "models": [b.model for b in buckets]}


async def buckets_changed(
    sql: PostgresExecutor,
    conn: Conn,
    buckets: list[Bucket],
    now: datetime | None,
    change: Change[A],
) -> A:
    """Within the caller's transaction on `conn`: lock `buckets` (in this order, created if
    missing), apply `change` at the database's time and write the new states."""
    keys = _keys(buckets)
    await sql.fetch(conn, "rate_limit_ensure", **keys)
    (clock,) = await sql.fetch(conn, "rate_limit_now", now=now)
    rows = await sql.fetch(conn, "rate_limit_lock", **keys)
    states, answer = change(held_states(buckets, rows), clock["now"])
    if states is not None:
        await sql.fetch(
            conn,
            "rate_limit_write",
            **keys,
            requests_at=[s.requests_at for s in states],
            tokens_at=[s.tokens_at for s in states],
        )
    return answer


class PostgresRateLimitWrites:
    _sql: PostgresExecutor

    async def buckets_locked(self, request: BucketChange[A]) -> A:
        r = request
        return await self._sql.run(
            lambda conn: buckets_changed(self._sql, conn, r.buckets, r.now, r.change),
            transaction=True,
        )

    async def reroute_write(self, request: Reroute) -> bool:
        """One statement: its DML writes the event too."""
        return await self._sql.write_one("job_reroute", **record_params(request)) is not None

    async def key_purge_write(self, request: KeyPurgeWrite) -> int:
        async def purge(conn: Conn) -> int:
            await self._sql.fetch(conn, "job_claim_lock")  # no claim between check and take
            rows = await self._sql.fetch(conn, "rate_limit_key_purge", **record_params(request))
            return len(rows)

        return await self._sql.run(purge, transaction=True)
