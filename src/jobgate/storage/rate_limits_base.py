"""The dialect-free half of RateLimitStore: the rules of domain.rate_limits applied to bucket
rows that a dialect locks, reads and writes (`_buckets_locked`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from jobgate.domain import rate_limits as rules
from jobgate.domain.rate_limits import Bucket, BucketState

# Given the locked buckets with their states and the database's time (Unix seconds): the new
# states to write (None: write nothing) and the answer.
Change = Callable[[list[tuple[Bucket, BucketState]], float], tuple[list[BucketState] | None, float]]


def _ordered(buckets: Sequence[Bucket]) -> list[Bucket]:
    # One lock order for every caller: two claims never wait on each other's rows in a cycle.
    return sorted({(b.provider, b.model): b for b in buckets}.values(), key=_key)


def _key(bucket: Bucket) -> tuple[str, str]:
    return (bucket.provider, bucket.model)


class RateLimitBase:
    """Mixed into a storage class that supplies `_buckets_locked` and `_buckets_read`."""

    async def _buckets_locked(
        self, buckets: list[Bucket], now: datetime | None, change: Change
    ) -> float:
        raise NotImplementedError

    async def _buckets_read(
        self, buckets: list[Bucket], now: datetime | None
    ) -> tuple[list[tuple[Bucket, BucketState]], float]:
        raise NotImplementedError

    async def rate_limit_take(
        self, *, buckets: Sequence[Bucket], reserve_tokens: int = 0, now: datetime | None = None
    ) -> float:
        def take(
            held: list[tuple[Bucket, BucketState]], at: float
        ) -> tuple[list[BucketState] | None, float]:
            wait_s = rules.admit(held, at)
            if wait_s > 0:
                return None, wait_s
            taken = [(bucket, rules.take(bucket, state, at)) for bucket, state in held]
            return [rules.spend(b, s, reserve_tokens, at) for b, s in taken], 0.0

        if not buckets:
            return 0.0
        return await self._buckets_locked(_ordered(buckets), now, take)

    async def rate_limit_give_back(self, *, buckets: Sequence[Bucket]) -> None:
        def give_back(
            held: list[tuple[Bucket, BucketState]], at: float
        ) -> tuple[list[BucketState] | None, float]:
            return [rules.give_back(bucket, state) for bucket, state in held], 0.0

        if buckets:
            await self._buckets_locked(_ordered(buckets), None, give_back)

    async def rate_limit_spend(
        self, *, spends: Sequence[tuple[Bucket, int]], now: datetime | None = None
    ) -> None:
        tokens: dict[tuple[str, str], int] = {}
        for bucket, count in spends:
            tokens[_key(bucket)] = tokens.get(_key(bucket), 0) + count

        def spend(
            held: list[tuple[Bucket, BucketState]], at: float
        ) -> tuple[list[BucketState] | None, float]:
            return [rules.spend(b, s, tokens[_key(b)], at) for b, s in held], 0.0

        wanted = [bucket for bucket, _ in spends if bucket.tpm > 0]
        if wanted and any(tokens.values()):
            await self._buckets_locked(_ordered(wanted), now, spend)

    async def rate_limit_waits(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], float]:
        if not buckets:
            return {}
        held, at = await self._buckets_read(_ordered(buckets), now)
        waits = {_key(b): rules.admit([(b, s)], at) for b, s in held}
        return {key: wait_s for key, wait_s in waits.items() if wait_s > 0}
