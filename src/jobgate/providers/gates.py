"""Per-provider backpressure inside one process: a concurrency cap and a circuit breaker.

The breaker opens after `breaker_failure_threshold` consecutive failures (retryable errors,
unknown outcomes); while open the worker claims no job for that provider, so its jobs wait in
the queue instead of being retried harder. After `breaker_reset_s` it lets one probe through
(half-open): success closes it, failure opens it again for twice as long (capped). A rate limit
pauses claims until the provider's Retry-After, for at most `rate_limit_pause_max_s`: limits
are per model at both providers, so the rate-limited job itself waits the whole time but the
provider's other models are held back only briefly. Fatal errors say nothing about the
provider's health and do not count; a quota or spend-limit error (fatal too) is an alert: a
metric and an error log.

The breaker's open state is shared through the database (services.breaker_sync): a process
that opens a breaker writes until when, the others read it at claim planning (cached up to a
second) and keep away too, then each may send one probe; the probe that succeeds closes it for
all. Consecutive-failure counts and rate-limit pauses stay per process.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence

from jobgate import errors, metrics
from jobgate.clock import Clock, SystemClock
from jobgate.config import ProviderConfig
from jobgate.providers.health import CallHealth

log = logging.getLogger(__name__)

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"
MAX_RESET_S = 600.0


class CircuitBreaker:
    def __init__(
        self,
        *,
        failure_threshold: int,
        reset_s: float,
        clock: Clock,
        max_pause_s: float = float("inf"),
    ) -> None:
        self._threshold = failure_threshold
        self._max_pause_s = max_pause_s
        self._base_reset_s = reset_s
        self._reset_s = reset_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._paused_until = 0.0
        self._shared_until: float | None = None  # another process opened it (monotonic)
        self.probe: str | None = None  # the job sent as the half-open probe

    @property
    def state(self) -> str:
        if self._opened_at is None:
            if self._shared_until is None:
                return CLOSED
            return OPEN if self._clock.monotonic() < self._shared_until else HALF_OPEN
        if self._clock.monotonic() >= self._opened_at + self._reset_s:
            return HALF_OPEN
        return OPEN

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def admits(self, wanted: int) -> int:
        """How many of `wanted` new calls may start now."""
        if self.paused_left_s() > 0 or self.open_left_s() is not None:
            return 0
        return wanted if self.state == CLOSED else min(wanted, 1)

    def open_left_s(self) -> float | None:
        """None while it lets calls through (closed, or half-open with no probe out); else
        the seconds until it half-opens (0: half-open, its one probe out)."""
        state = self.state
        if state == CLOSED or (state == HALF_OPEN and self.probe is None):
            return None
        if state == HALF_OPEN:
            return 0.0
        until = self._shared_until if self._opened_at is None else self._opened_at + self._reset_s
        return max(0.0, (until or 0.0) - self._clock.monotonic())

    def paused_left_s(self) -> float:
        """Seconds left of a rate-limit pause (the provider's Retry-After); 0: none."""
        return max(0.0, self._paused_until - self._clock.monotonic())

    def started(self, job_id: str) -> None:
        if self.state == HALF_OPEN and self.probe is None:
            self.probe = job_id

    @property
    def opened_at(self) -> float | None:
        """When this process last opened it (monotonic), or None."""
        return self._opened_at

    @property
    def reset_s(self) -> float:
        return self._reset_s

    def shared(self, left_s: float | None) -> None:
        """What the database says: open for `left_s` more seconds (0 or less: half-open), or
        None (no process has it open)."""
        self._shared_until = None if left_s is None else self._clock.monotonic() + left_s

    def succeeded(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._shared_until = None
        self._reset_s = self._base_reset_s
        self.probe = None

    def failed(self) -> None:
        self._failures += 1
        if self.state == HALF_OPEN or self.probe is not None:
            # The probe failed: stay away twice as long.
            self._reset_s = min(self._reset_s * 2, MAX_RESET_S)
            self._opened_at = self._clock.monotonic()
        elif self._failures >= self._threshold and self._opened_at is None:
            self._opened_at = self._clock.monotonic()
        self.probe = None

    def rate_limited(self, retry_after_s: float) -> None:
        """The provider said when to come back: no new calls before then (capped)."""
        pause_s = min(retry_after_s, self._max_pause_s)
        self._paused_until = max(self._paused_until, self._clock.monotonic() + pause_s)
        self.probe = None

    def abandoned(self, job_id: str) -> None:
        """A call ended without telling anything about the provider (cancelled, lost)."""
        if self.probe == job_id:
            self.probe = None


def _log_opened(
    provider: str, breaker: CircuitBreaker, error: BaseException | None, *, probe: bool
) -> None:
    """An opened breaker is an outage an operator must see: which provider, and why."""
    reason = "probe_failed" if probe else "consecutive_failures"
    cause = "" if error is None else getattr(error, "code", None) or type(error).__name__
    log.warning(
        "circuit breaker opened: provider %s failed %d times in a row (last: %s); no new calls "
        "for %.0f s, then one probe",
        provider,
        breaker.consecutive_failures,
        cause,
        breaker.reset_s,
        extra={
            "provider": provider,
            "reason": reason,
            "error_code": cause,
            "consecutive_failures": breaker.consecutive_failures,
            "open_s": breaker.reset_s,
        },
    )


def _state_reader(breaker: CircuitBreaker) -> Callable[[], float]:
    return lambda: metrics.BREAKER_STATES[breaker.state]


def _cap_reader(gate: ProviderGate) -> Callable[[], float]:
    return lambda: gate.health.cap(gate.cap)


@dataclasses.dataclass(slots=True)
class ProviderGate:
    cap: int
    breaker: CircuitBreaker
    health: CallHealth
    inflight: set[str] = dataclasses.field(default_factory=set)
    started_at: dict[str, float] = dataclasses.field(default_factory=dict)  # monotonic

    def room(self, wanted: int) -> int:
        cap = self.health.cap(self.cap)
        return max(0, min(wanted, cap - len(self.inflight), self.breaker.admits(wanted)))


class ProviderGates:
    def __init__(self, configs: Mapping[str, ProviderConfig], *, clock: Clock | None = None):
        clock = clock or SystemClock()
        # Breaker changes to share: (provider, seconds open), or (provider, None) for closed.
        self.breaker_changes: list[tuple[str, float | None]] = []
        self._gates = {
            name: ProviderGate(
                config.concurrency,
                CircuitBreaker(
                    failure_threshold=config.breaker_failure_threshold,
                    reset_s=config.breaker_reset_s,
                    clock=clock,
                    max_pause_s=config.rate_limit_pause_max_s,
                ),
                CallHealth(
                    clock=clock,
                    latency_s=config.backpressure_latency_s,
                    error_rate=config.backpressure_error_rate,
                ),
            )
            for name, config in configs.items()
        }
        self._clock = clock
        for name, gate in self._gates.items():
            # Read at scrape time; the newest registry of a process owns the series.
            metrics.BREAKER_STATE.labels(name).set_function(_state_reader(gate.breaker))
            metrics.PROVIDER_CONCURRENCY_ALLOWED.labels(name).set_function(_cap_reader(gate))

    def gate(self, provider: str) -> ProviderGate | None:
        return self._gates.get(provider)

    def reconfigure(self, configs: Mapping[str, ProviderConfig]) -> None:
        """New concurrency caps (a reloaded configuration); calls in flight keep running."""
        for name, gate in self._gates.items():
            if name in configs:
                gate.cap = configs[name].concurrency

    def apply_shared(self, open_left_s: Mapping[str, float]) -> None:
        """The breakers open in the database (provider -> seconds left), for every gate."""
        for name, gate in self._gates.items():
            gate.breaker.shared(open_left_s.get(name))

    def claim_plan(
        self, providers: Sequence[str] | None, free: int
    ) -> list[tuple[list[str] | None, int]]:
        """How to claim up to `free` jobs: (provider filter, count) pairs. One unfiltered claim
        while no provider is held back; otherwise the unconstrained providers together, then
        each constrained one up to its room, and none whose breaker is open or cap is full."""
        names = list(providers) if providers is not None else list(self._gates)
        rooms = {n: (g.room(free) if (g := self._gates.get(n)) else free) for n in names}
        if all(room >= free for room in rooms.values()):
            return [(None if providers is None else names, free)]
        plan: list[tuple[list[str] | None, int]] = []
        unconstrained = [n for n in names if rooms[n] >= free]
        if unconstrained:
            plan.append((unconstrained, free))
        plan += [([n], rooms[n]) for n in names if 0 < rooms[n] < free]
        return plan

    def started(self, provider: str, job_id: str) -> None:
        gate = self._gates.get(provider)
        if gate is not None:
            gate.inflight.add(job_id)
            gate.started_at[job_id] = self._clock.monotonic()
            gate.breaker.started(job_id)

    def record(self, provider: str, job_id: str, error: BaseException | None) -> None:
        """What a call (or a status check) said about the provider's health."""
        gate = self._gates.get(provider)
        if gate is None:
            return
        breaker = gate.breaker
        was_closed, opened_at = breaker.state == CLOSED, breaker.opened_at
        self._judge(provider, job_id, breaker, error)
        self._sample(gate, job_id, error)
        if breaker.opened_at is not None and breaker.opened_at != opened_at:
            self.breaker_changes.append((provider, breaker.reset_s))
            _log_opened(provider, breaker, error, probe=not was_closed)
        elif not was_closed and breaker.state == CLOSED:
            self.breaker_changes.append((provider, None))
            log.warning(
                "circuit breaker closed: provider %s answered again, claims resume",
                provider,
                extra={"provider": provider, "reason": "call_succeeded", "job_id": job_id},
            )

    def _sample(self, gate: ProviderGate, job_id: str, error: BaseException | None) -> None:
        started = gate.started_at.pop(job_id, None)
        latency_s = None if started is None else self._clock.monotonic() - started
        if error is None:
            gate.health.add(latency_s=latency_s, failed=False)
        elif isinstance(error, errors.ProviderError) and not isinstance(
            error,
            errors.ProviderFatal | errors.ProviderCancelUnsupported | errors.ProviderRateLimited,
        ):
            gate.health.add(latency_s=None, failed=True)

    def _judge(
        self, provider: str, job_id: str, breaker: CircuitBreaker, error: BaseException | None
    ) -> None:
        if isinstance(error, errors.ProviderQuotaExceeded):
            metrics.PROVIDER_QUOTA_ERRORS.labels(provider, error.code).inc()
            log.error(
                "provider quota or spend limit reached: jobs fail until it is raised",
                extra={
                    "provider": provider,
                    "job_id": job_id,
                    "error_code": error.code,
                    "status_code": error.status_code,
                    "request_id": error.request_id,
                },
            )
        if error is None or isinstance(
            error, errors.ProviderFatal | errors.ProviderCancelUnsupported
        ):
            breaker.succeeded()
        elif isinstance(error, errors.ProviderRateLimited):
            breaker.rate_limited(error.retry_after_s)
        elif isinstance(error, errors.ProviderError):
            breaker.failed()
        else:
            breaker.abandoned(job_id)

    def finished(self, provider: str, job_id: str) -> None:
        gate = self._gates.get(provider)
        if gate is not None:
            gate.inflight.discard(job_id)
            gate.started_at.pop(job_id, None)
            gate.breaker.abandoned(job_id)
