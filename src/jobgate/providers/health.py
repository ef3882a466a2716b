"""Latency-aware backpressure: a provider's recent calls in one worker process, and
the concurrency they leave it. When the mean latency of recent successful calls climbs past
`backpressure_latency_s`, or their error rate past `backpressure_error_rate`, the provider's
per-worker concurrency shrinks in proportion, down to 1, so claims slow down before the
breaker opens (which takes it to 0). It grows back as the recent calls recover.

"Recent" is the last WINDOW_CALLS calls within WINDOW_S seconds; fewer than MIN_CALLS say
nothing. Retryable errors and unknown outcomes count as errors; rate limits, fatal errors and
abandoned calls are not samples (they say nothing about the provider's health, or the 429
pause handles them)."""

from __future__ import annotations

import collections
import dataclasses
import math

from jobgate.clock import Clock

WINDOW_S = 60.0
WINDOW_CALLS = 50
MIN_CALLS = 5


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    at: float  # monotonic
    latency_s: float | None  # None: not timed (a status check)
    failed: bool


class CallHealth:
    def __init__(self, *, clock: Clock, latency_s: float | None, error_rate: float | None) -> None:
        self._clock = clock
        self._latency_s = latency_s
        self._error_rate = error_rate
        self._samples: collections.deque[Sample] = collections.deque(maxlen=WINDOW_CALLS)

    @property
    def enabled(self) -> bool:
        return self._latency_s is not None or self._error_rate is not None

    def add(self, *, latency_s: float | None, failed: bool) -> None:
        if self.enabled:
            self._samples.append(Sample(self._clock.monotonic(), latency_s, failed))

    def recent(self) -> tuple[float | None, float | None]:
        """(mean latency of recent successes, recent error rate); None where too few calls."""
        cutoff = self._clock.monotonic() - WINDOW_S
        while self._samples and self._samples[0].at < cutoff:
            self._samples.popleft()
        if len(self._samples) < MIN_CALLS:
            return None, None
        rate = sum(s.failed for s in self._samples) / len(self._samples)
        timed = [s.latency_s for s in self._samples if not s.failed and s.latency_s is not None]
        mean = sum(timed) / len(timed) if len(timed) >= MIN_CALLS else None
        return mean, rate

    def cap(self, cap: int) -> int:
        """The concurrency `cap` scaled down by how far past its thresholds the provider is:
        by threshold / mean latency, and by (1 - error rate) / (1 - error threshold); at
        least 1."""
        if not self.enabled:
            return cap
        mean, rate = self.recent()
        factor = 1.0
        if self._latency_s is not None and mean is not None and mean > self._latency_s:
            factor = min(factor, self._latency_s / mean)
        if self._error_rate is not None and rate is not None and rate > self._error_rate:
            factor = min(factor, (1.0 - rate) / (1.0 - self._error_rate))
        return cap if factor >= 1.0 else max(1, math.floor(cap * factor + 1e-9))
