"""Storage for shared rate limits (a part of the Storage contract): the bucket rows of
domain.rate_limits, locked and updated in one short transaction each, so that every worker
process of a deployment draws on the same budget."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobgate.domain.job import Job, Lease
from jobgate.domain.rate_limits import Bucket


class RateLimitStore(Protocol):
    async def rate_limit_take(
        self, *, buckets: Sequence[Bucket], reserve_tokens: int = 0, now: datetime | None = None
    ) -> float:
        """Admit one request under every bucket at once (creating missing rows): 0.0 when
        admitted (each bucket's next start moved one spacing ahead, and `reserve_tokens` added
        to each token bucket's debt in the same transaction), else the seconds to wait
        (nothing changed). Serialised per bucket across processes."""
        ...

    async def rate_limit_give_back(self, *, buckets: Sequence[Bucket]) -> None:
        """Return a request admitted by rate_limit_take that was not used."""
        ...

    async def rate_limit_spend(
        self, *, spends: Sequence[tuple[Bucket, int]], now: datetime | None = None
    ) -> None:
        """Add tokens (negative: an estimate corrected down) to the buckets' debt."""
        ...

    async def rate_limit_waits(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], float]:
        """Seconds until each bucket admits its next request (absent: it admits now)."""
        ...

    async def rate_limited_queued(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], int]:
        """Claimable queued jobs held back by each closed bucket (absent: open or none)."""
        ...

    async def breaker_open(
        self, *, provider: str, open_s: float, opened_by: str, now: datetime | None = None
    ) -> None:
        """A process opened `provider`'s circuit breaker: every process keeps away from it for
        `open_s` seconds (by the database's clock), then may send one probe."""
        ...

    async def breaker_close(self, *, provider: str) -> None:
        """A probe succeeded: `provider`'s breaker is closed for every process."""
        ...

    async def breaker_states(self, *, now: datetime | None = None) -> dict[str, float]:
        """Every open breaker: provider -> seconds left open (0 or less: half-open)."""
        ...

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
        """Move a running job (fenced on `lease`) to another model route target for its next
        attempt: its provider, model and request's `model`, with a running-to-running event
        giving `reason`. False when the lease is no longer held (nothing changed)."""
        ...

    async def job_queue_position(self, *, job: Job, now: datetime | None = None) -> int:
        """1 + the claimable queued jobs of the job's tenant ahead of it in claim order
        (priority, run_at, id). An estimate: other tenants' fair shares, caps and limits
        decide how fast that line moves."""
        ...
