"""Per-minute rollups of the last hour for the console's charts, computed from job
transitions: throughput, errors, queue depth and queue wait (p50/p95), for all jobs or one
tenant and/or provider. Pure: the caller reads the transitions and the depth now.

Queue depth is walked back from the depth now: each arrival into the queue after a
moment was not yet queued then, each departure from it still was; a minute shows its peak.
The depth now is counted over the head of each tenant's line only (QueueDepth.exact): past
that bound the depth and every minute walked back from it are floors (`depth_exact`).
Queue wait is the time from a job's last entry into the queue (or its run_at, if later: a
scheduled job or a retry backoff is not waiting) to its claim.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from jobgate.domain.states import JobState

WINDOW_S = 3600
BUCKET_S = 60


@dataclasses.dataclass(frozen=True, slots=True)
class Transition:
    """One applied job event with the job's tenant and provider (what a chart counts)."""

    job_id: str
    tenant_id: str
    provider: str
    from_state: JobState | None
    to_state: JobState
    reason: str | None
    at: datetime
    # For a claim (to running): when the job last entered the queue, and its run_at now.
    queued_at: datetime | None
    run_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class QueueDepth:
    tenant_id: str
    provider: str
    queued: int
    exact: bool = True  # False: `queued` is a floor (its tenant's line was walked to a bound)


@dataclasses.dataclass(frozen=True, slots=True)
class Scope:
    """Which jobs a rollup counts: None means any."""

    tenant_id: str | None = None
    provider: str | None = None

    def holds(self, tenant_id: str, provider: str) -> bool:
        return (self.tenant_id is None or self.tenant_id == tenant_id) and (
            self.provider is None or self.provider == provider
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Rollup:
    starts: list[datetime]  # the start of each minute, oldest first
    succeeded: list[int]
    errors: list[int]  # attempts that ended in an error (retried or failed)
    error_rate: list[float | None]  # errors / attempts ended; None: none ended
    depth: list[int]  # the most jobs queued at once in each minute
    wait_p50_s: list[float | None]
    wait_p95_s: list[float | None]
    complete: bool  # False: the read was capped, the oldest minutes miss transitions
    depth_exact: bool = True  # False: the depth now is a floor, and so is each minute's


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    """One tenant and provider over the whole window."""

    tenant_id: str
    provider: str
    queued: int
    succeeded: int
    errors: int
    wait_p50_s: float | None
    wait_p95_s: float | None
    queued_exact: bool = True  # False: `queued` is a floor (QueueDepth.exact)

    @property
    def error_rate(self) -> float | None:
        ended = self.succeeded + self.errors
        return None if ended == 0 else self.errors / ended


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (`fraction` in (0, 1]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def wait_s(t: Transition) -> float | None:
    """A claim's queue wait in seconds; None for any other transition or an unknown start."""
    if t.to_state is not JobState.RUNNING or t.queued_at is None:
        return None
    start = t.queued_at
    if start < t.run_at <= t.at:  # due later than it was queued: waiting only since due
        start = t.run_at
    return max(0.0, (t.at - start).total_seconds())


def is_error(t: Transition) -> bool:
    """An attempt that ended in an error: running -> failed, or running -> queued (a retry;
    an operator's redrive starts from failed, not running)."""
    return t.from_state is JobState.RUNNING and t.to_state in (JobState.FAILED, JobState.QUEUED)


def _arrival(t: Transition) -> int:
    """+1 for a transition into the queue, -1 for one out of it, 0 otherwise."""
    if t.to_state is JobState.QUEUED and t.from_state is not JobState.QUEUED:
        return 1
    if t.from_state is JobState.QUEUED and t.to_state is not JobState.QUEUED:
        return -1
    return 0


def rollup(
    transitions: Iterable[Transition],
    depth_now: Iterable[QueueDepth],
    *,
    now: datetime,
    scope: Scope = Scope(),
    capped: bool = False,
) -> Rollup:
    """The last hour, minute by minute (the current minute last)."""
    buckets = WINDOW_S // BUCKET_S
    end = now.replace(second=0, microsecond=0) + timedelta(seconds=BUCKET_S)
    start = end - timedelta(seconds=WINDOW_S)
    starts = [start + timedelta(seconds=BUCKET_S * i) for i in range(buckets)]
    succeeded = [0] * buckets
    errors = [0] * buckets
    waits: list[list[float]] = [[] for _ in range(buckets)]
    scoped: list[Transition] = []
    for t in transitions:
        if not scope.holds(t.tenant_id, t.provider) or t.at < start or t.at >= end:
            continue
        scoped.append(t)
        index = int((t.at - start).total_seconds() // BUCKET_S)
        if t.to_state is JobState.SUCCEEDED:
            succeeded[index] += 1
        elif is_error(t):
            errors[index] += 1
        wait = wait_s(t)
        if wait is not None:
            waits[index].append(wait)
    # Walk back from the depth now, newest transition first: before an arrival the queue held
    # one job fewer, before a departure one more. Each minute shows its peak.
    scoped.sort(key=lambda t: t.at, reverse=True)
    depth_now = list(depth_now)
    level = sum(d.queued for d in depth_now if scope.holds(d.tenant_id, d.provider))
    floors = _walked_partly(depth_now)
    depth = [0] * buckets
    walked = 0
    for index in range(buckets - 1, -1, -1):
        peak = level  # at the minute's end (the current minute's: now)
        while walked < len(scoped) and scoped[walked].at >= starts[index]:
            level -= _arrival(scoped[walked])
            peak = max(peak, level)
            walked += 1
        depth[index] = max(0, peak)
    rates: list[float | None] = [
        None if s + e == 0 else e / (s + e) for s, e in zip(succeeded, errors, strict=True)
    ]
    return Rollup(
        starts=starts,
        succeeded=succeeded,
        errors=errors,
        error_rate=rates,
        depth=depth,
        wait_p50_s=[percentile(w, 0.5) for w in waits],
        wait_p95_s=[percentile(w, 0.95) for w in waits],
        complete=not capped,
        depth_exact=not any(scope.tenant_id in (None, t) for t in floors),
    )


def _walked_partly(depth_now: Iterable[QueueDepth]) -> set[str]:
    """The tenants whose line was longer than the depth's walk: any of their providers may
    have more queued than counted (or some queued that the walk never reached)."""
    return {d.tenant_id for d in depth_now if not d.exact}


def summaries(transitions: Iterable[Transition], depth_now: Iterable[QueueDepth]) -> list[Summary]:
    """Every tenant and provider seen in the window or queued now, busiest first."""
    counts: dict[tuple[str, str], list[int]] = {}
    waits: dict[tuple[str, str], list[float]] = {}
    for t in transitions:
        key = (t.tenant_id, t.provider)
        row = counts.setdefault(key, [0, 0, 0])
        if t.to_state is JobState.SUCCEEDED:
            row[1] += 1
        elif is_error(t):
            row[2] += 1
        wait = wait_s(t)
        if wait is not None:
            waits.setdefault(key, []).append(wait)
    depth_now = list(depth_now)
    floors = _walked_partly(depth_now)
    for d in depth_now:
        counts.setdefault((d.tenant_id, d.provider), [0, 0, 0])[0] += d.queued
    rows = [
        Summary(
            tenant_id=tenant_id,
            provider=provider,
            queued=queued,
            succeeded=ok,
            errors=bad,
            wait_p50_s=percentile(waits.get((tenant_id, provider), []), 0.5),
            wait_p95_s=percentile(waits.get((tenant_id, provider), []), 0.95),
            queued_exact=tenant_id not in floors,
        )
        for (tenant_id, provider), (queued, ok, bad) in counts.items()
    ]
    return sorted(rows, key=lambda r: (-(r.succeeded + r.errors + r.queued), r.tenant_id))
