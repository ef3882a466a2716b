"""RateLimitStore, written once over the executor: the rules of domain.rate_limits applied to
bucket rows, provider breakers, reroutes and queue positions. Changing buckets reads, decides
and writes them in one transaction: the dialect's Transactions.buckets_locked."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from jobgate.domain import ranges
from jobgate.domain import rate_limits as rules
from jobgate.domain.job import Job, Lease
from jobgate.domain.rate_limits import Bucket, BucketState, Take
from jobgate.storage.executor import Row, SqlPart
from jobgate.storage.records import ClaimPolicy
from jobgate.storage.transaction_requests import BucketChange, Held, KeyPurgeWrite, Reroute


def _ordered(buckets: Sequence[Bucket]) -> list[Bucket]:
    # One lock order for every caller: two claims never wait on each other's rows in a cycle.
    return sorted({(b.provider, b.model): b for b in buckets}.values(), key=_key)


def _key(bucket: Bucket) -> tuple[str, str]:
    return (bucket.provider, bucket.model)


def key_buckets(started: Iterable[tuple[str, str | None]], policy: ClaimPolicy) -> list[Bucket]:
    """The buckets of the concurrency keys under rpm_per_key among the (tenant id, key) of the
    jobs a claim started, in lock order: the claim takes one start from each (one job per key
    at most: the claim keeps only a key's first)."""
    found = []
    for tenant_id, key in started:
        rpm = policy.share(tenant_id).rpm_per_key
        if key is not None and rpm > 0:
            found.append(rules.key_bucket(tenant_id, key, rpm))
    return _ordered(found)


def started(held: Held, at: float) -> tuple[list[BucketState] | None, None]:
    """The Change of a claim's key buckets: one start taken from each (the claim found each
    open at `at`, serialised with every other claim, so each admits it)."""
    return [rules.take(bucket, state, at) for bucket, state in held], None


def held_states(buckets: list[Bucket], rows: Sequence[Row]) -> Held:
    """Each bucket with its state in `rows` (provider, model, requests_at, tokens_at); a bucket
    without a row, or with NULLs (never written), starts empty."""
    found = {(r["provider"], r["model"]): r for r in rows}
    held = []
    for bucket in buckets:
        row = found.get(_key(bucket))
        if row is None or row["requests_at"] is None:
            held.append((bucket, BucketState()))
        else:
            held.append((bucket, BucketState(row["requests_at"], row["tokens_at"])))
    return held


class RateLimitQueries(SqlPart):
    def _bucket_keys(self, buckets: Sequence[Bucket]) -> Any:
        """The `:buckets` parameter: a JSON array of {provider, model}."""
        return self._sql.codec.json([{"provider": b.provider, "model": b.model} for b in buckets])

    async def _buckets_read(
        self, buckets: list[Bucket], now: datetime | None
    ) -> tuple[Held, float]:
        rows = await self._sql.read(
            "rate_limit_read", buckets=self._bucket_keys(buckets), now=self._sql.codec.now(now)
        )
        return held_states(buckets, rows), float(rows[0]["now"])

    async def rate_limit_take(
        self, *, buckets: Sequence[Bucket], reserve_tokens: int = 0, now: datetime | None = None
    ) -> Take:
        def take(held: Held, at: float) -> tuple[list[BucketState] | None, Take]:
            wait_s = rules.admit(held, at)
            if wait_s > 0:
                return None, Take(wait_s)
            taken = [(bucket, rules.take(bucket, state, at)) for bucket, state in held]
            states = [rules.spend(b, s, rules.charge(b, reserve_tokens), at) for b, s in taken]
            return states, Take(0.0, at)

        if not buckets:
            return Take(0.0, 0.0)  # nothing limits it (and nothing to give back)
        return await self._tx.buckets_locked(BucketChange(_ordered(buckets), now, take))

    async def rate_limit_give_back(self, *, buckets: Sequence[Bucket], taken_at: float) -> None:
        def give_back(held: Held, at: float) -> tuple[list[BucketState] | None, None]:
            return [rules.give_back(bucket, state, taken_at) for bucket, state in held], None

        if buckets:
            await self._tx.buckets_locked(BucketChange(_ordered(buckets), None, give_back))

    async def rate_limit_spend(
        self, *, spends: Sequence[tuple[Bucket, int]], now: datetime | None = None
    ) -> None:
        tokens: dict[tuple[str, str], int] = {}
        for bucket, count in spends:
            tokens[_key(bucket)] = tokens.get(_key(bucket), 0) + count

        def spend(held: Held, at: float) -> tuple[list[BucketState] | None, None]:
            return [rules.spend(b, s, tokens[_key(b)], at) for b, s in held], None

        wanted = [bucket for bucket, _ in spends if bucket.tpm > 0]
        if wanted and any(tokens.values()):
            await self._tx.buckets_locked(BucketChange(_ordered(wanted), now, spend))

    async def rate_limit_waits(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], float]:
        if not buckets:
            return {}
        held, at = await self._buckets_read(_ordered(buckets), now)
        waits = {_key(b): rules.admit([(b, s)], at) for b, s in held}
        return {key: wait_s for key, wait_s in waits.items() if wait_s > 0}

    async def rate_limited_queued(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], int]:
        waits = await self.rate_limit_waits(buckets=buckets, now=now)
        closed = [b for b in buckets if _key(b) in waits]
        if not closed:
            return {}
        rows = await self._sql.read(
            "rate_limited_queued", buckets=self._bucket_keys(closed), now=self._sql.codec.now(now)
        )
        return {(r["provider"], r["model"]): int(r["queued"]) for r in rows}

    async def rate_limit_key_purge(self, *, limit: int, now: datetime | None = None) -> int:
        return await self._tx.key_purge_write(KeyPurgeWrite(limit, self._sql.codec.now(now)))

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
        at = self._sql.codec.now(now)
        reroute = Reroute(lease.job_id, lease.token, provider, model, actor, reason, at)
        return await self._tx.reroute_write(reroute)

    async def job_queue_position(self, *, job: Job, now: datetime | None = None) -> int:
        codec = self._sql.codec
        row = await self._sql.read_one(
            "job_queue_position",
            tenant_id=job.tenant_id,
            priority=job.priority,
            run_at=codec.time(job.run_at),
            id=job.id,
            now=codec.now(now),
            counted=ranges.QUEUE_POSITION_COUNTED,
        )
        assert row is not None  # a count answers one row
        return abs(int(row["place"]))  # negative: a floor (the walk stopped at its bound)

    async def breaker_open(
        self, *, provider: str, open_s: float, opened_by: str, now: datetime | None = None
    ) -> None:
        await self._sql.write_count(
            "breaker_open",
            provider=provider,
            open_s=open_s,
            opened_by=opened_by,
            now=self._sql.codec.now(now),
        )

    async def breaker_close(self, *, provider: str) -> None:
        await self._sql.write_count("breaker_close", provider=provider)

    async def breaker_states(self, *, now: datetime | None = None) -> dict[str, float]:
        rows = await self._sql.read("breaker_states", now=self._sql.codec.now(now))
        return {row["provider"]: float(row["left_s"]) for row in rows}
