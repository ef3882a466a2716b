"""The worker's side of shared rate limits: which claims a rate-limited provider or
model needs, one request taken from its buckets before each (so a job that must wait stays
queued: no lease, no attempt spent), and the token estimate settled against the usage after
the call. The buckets live in the database: every worker process draws on the same budget.

Limits come from jobgate.toml (`rpm`, `tpm`, `model_limits`) and reload with it
(services.config_reload): the worker hands the new ones to `reconfigure`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence

from jobgate import errors, metrics
from jobgate.config import ProviderConfig
from jobgate.domain import rate_limits as rules
from jobgate.domain.job import Job
from jobgate.domain.rate_limits import PROVIDER_WIDE, Bucket
from jobgate.storage.protocol import RateLimitStore

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimTarget:
    """One claim for a rate-limited provider: its jobs for `models` (or all but
    `skip_models`), after one request was taken from every bucket in `buckets` (none: the
    claim is not limited and takes as many as it may)."""

    provider: str
    models: tuple[str, ...] | None
    skip_models: tuple[str, ...] | None
    buckets: tuple[Bucket, ...]


def targets_for(name: str, config: ProviderConfig) -> list[ClaimTarget]:
    """The claims a provider's jobs need (empty: it has no rate limit)."""
    wide = (
        (Bucket(name, PROVIDER_WIDE, config.rpm, config.tpm),)
        if config.rpm > 0 or config.tpm > 0
        else ()
    )
    limited = {m: lim for m, lim in config.model_limits.items() if lim.rpm > 0 or lim.tpm > 0}
    if not wide and not limited:
        return []
    targets = [
        ClaimTarget(name, (model,), None, (*wide, Bucket(name, model, lim.rpm, lim.tpm)))
        for model, lim in sorted(limited.items())
    ]
    targets.append(ClaimTarget(name, None, tuple(sorted(limited)) or None, wide))
    return targets


def limited_providers(configs: Mapping[str, ProviderConfig]) -> frozenset[str]:
    """Providers with a rate limit (for them or one of their models)."""
    return frozenset(name for name, config in configs.items() if targets_for(name, config))


class RateLimiter:
    def __init__(self, *, storage: RateLimitStore, configs: Mapping[str, ProviderConfig]) -> None:
        self._storage = storage
        self._targets: dict[str, list[ClaimTarget]] = {}
        self.reconfigure(configs)
        self._estimates: dict[str, tuple[tuple[Bucket, ...], int]] = {}  # by job id
        # Tokens reserved by `take` for the job it admits, per target: its last estimate.
        self._reserve: dict[ClaimTarget, int] = {}
        self.wait_s = 0.0  # the shortest wait seen by the last claim (0: none)

    def reconfigure(self, configs: Mapping[str, ProviderConfig]) -> None:
        """The limits of a (re)loaded configuration; estimates of calls in flight stay."""
        targets = {name: targets_for(name, config) for name, config in configs.items()}
        self._targets = {name: found for name, found in targets.items() if found}

    @property
    def limited(self) -> frozenset[str]:
        """Providers with a rate limit (for them or one of their models)."""
        return frozenset(self._targets)

    def targets(self, provider: str) -> list[ClaimTarget]:
        return self._targets.get(provider, [])

    async def take(self, target: ClaimTarget) -> float | None:
        """Take one request from the target's buckets: the database's time of the take, or
        None (and the wait noted) when one of them does not admit it yet. A token bucket is
        charged a reservation in the same transaction (the target's last estimate), settled to
        the claimed job's estimate by `started`: without it, two processes could both be
        admitted between one's take and its charge, and together exceed the tpm (an enforcing
        simulator answered 429)."""
        taken = await self._storage.rate_limit_take(
            buckets=target.buckets, reserve_tokens=self._reservation(target)
        )
        if taken.at is not None:
            return taken.at
        model = target.models[0] if target.models else PROVIDER_WIDE
        metrics.RATE_LIMIT_WAITS.labels(target.provider, model).inc()
        wait_s = taken.wait_s
        self.wait_s = wait_s if self.wait_s <= 0 else min(self.wait_s, wait_s)
        return None

    async def unused(self, target: ClaimTarget, taken_at: float) -> None:
        """Give back a request taken at `taken_at` for a claim that found no job (and its
        reservation)."""
        await self._storage.rate_limit_give_back(buckets=target.buckets, taken_at=taken_at)
        spends = _moved(target.buckets, self._reservation(target), 0)
        if spends:
            await self._storage.rate_limit_spend(spends=spends)

    async def started(self, target: ClaimTarget, jobs: Sequence[Job]) -> None:
        """Charge the claimed jobs' estimated tokens to the target's token buckets, less what
        `take` reserved (for the first of them)."""
        metered = tuple(b for b in target.buckets if b.tpm > 0)
        if not metered:
            return
        reserved = self._reservation(target)
        spends: list[tuple[Bucket, int]] = []
        for job in jobs:
            estimate = rules.estimate_tokens(job.request)
            self._estimates[job.id] = (metered, estimate)
            self._reserve[target] = estimate
            spends += _moved(metered, reserved, estimate)
            reserved = 0
        if spends:
            await self._storage.rate_limit_spend(spends=spends)

    def _reservation(self, target: ClaimTarget) -> int:
        if not any(b.tpm > 0 for b in target.buckets):
            return 0
        return self._reserve.get(target, rules.DEFAULT_OUTPUT_TOKENS)

    def forget(self, job_id: str) -> None:
        """Drop a job's estimate, which stands as charged: its lease was lost (the call may
        have run), or the provider runs it in background mode."""
        self._estimates.pop(job_id, None)

    async def settle(
        self, job: Job, usage: Mapping[str, object] | None, *, succeeded: bool
    ) -> None:
        """Correct a call's token estimate by the usage it reported. Without usage, a call
        that succeeded keeps its estimate; one that did not (refused, cancelled, timed out)
        gives it back, so that a job the provider never ran holds no tenant back."""
        held = self._estimates.pop(job.id, None)
        used = rules.used_tokens(usage)
        if held is None or (used is None and succeeded):
            return
        metered, estimate = held
        spends = _moved(metered, estimate, used or 0)
        if not spends:
            return
        try:
            await self._storage.rate_limit_spend(spends=spends)
        except errors.StorageError:  # the estimate stands: the limit stays on the safe side
            log.warning("could not correct a token estimate", extra={"job_id": job.id})


def _moved(buckets: Sequence[Bucket], old: int, new: int) -> list[tuple[Bucket, int]]:
    """What one job's tokens going from `old` to `new` change each token bucket's debt by,
    each charged at most the bucket's capacity (domain.rate_limits.charge)."""
    moved = [(b, rules.charge(b, new) - rules.charge(b, old)) for b in buckets if b.tpm > 0]
    return [(bucket, tokens) for bucket, tokens in moved if tokens != 0]


async def refresh_gauges(storage: RateLimitStore, configs: Mapping[str, ProviderConfig]) -> None:
    """jobgate_rate_limited_jobs: claimable queued jobs behind each closed bucket (at scrape
    time, cluster-wide)."""
    buckets = {
        (b.provider, b.model): b
        for name, config in configs.items()
        for target in targets_for(name, config)
        for b in target.buckets
    }
    metrics.RATE_LIMITED_JOBS.clear()
    if not buckets:
        return
    waiting = await storage.rate_limited_queued(buckets=list(buckets.values()))
    for (provider, model), queued in waiting.items():
        metrics.RATE_LIMITED_JOBS.labels(provider, model).set(queued)


def buckets_of(name: str, config: ProviderConfig, model: str | None) -> tuple[Bucket, ...]:
    """The buckets a job for `model` on provider `name` must take a request from."""
    for target in targets_for(name, config):
        if target.models is None or model in target.models:
            return target.buckets
    return ()


async def wait_of(
    storage: RateLimitStore, name: str, config: ProviderConfig, model: str | None
) -> float:
    """Seconds until the shared rate limits admit a job for `model` (0: they do now)."""
    buckets = buckets_of(name, config, model)
    waits = await storage.rate_limit_waits(buckets=buckets) if buckets else {}
    return max(waits.values(), default=0.0)
