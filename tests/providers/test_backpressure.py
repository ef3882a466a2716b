"""Latency-aware backpressure, on a fake clock: a provider whose recent calls grow
slow or fail often gets fewer claims from this process before its breaker opens, and its full
concurrency back once they recover."""

from __future__ import annotations

import hypothesis
from hypothesis import strategies as st

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers import gates, health
from jobgate.testing import FakeClock

CAP = 8


def provider_gates(clock: FakeClock, **settings: float) -> gates.ProviderGates:
    config = ProviderConfig(kind="sim", concurrency=CAP, breaker_failure_threshold=100, **settings)
    return gates.ProviderGates({"sim": config}, clock=clock)


def call(g: gates.ProviderGates, clock: FakeClock, job_id: str, *, took_s: float,
         error: BaseException | None = None) -> None:  # fmt: skip
    g.started("sim", job_id)
    clock.advance(took_s)
    g.record("sim", job_id, error)
    g.finished("sim", job_id)


def room(g: gates.ProviderGates) -> int:
    gate = g.gate("sim")
    assert gate is not None
    return gate.room(100)


def test_slow_calls_shrink_the_concurrency_in_proportion() -> None:
    clock = FakeClock()
    g = provider_gates(clock, backpressure_latency_s=2.0)
    for i in range(health.MIN_CALLS - 1):
        call(g, clock, f"j{i}", took_s=8.0)
    assert room(g) == CAP  # too few calls to judge
    call(g, clock, "j-last", took_s=8.0)
    assert room(g) == 2  # 8 x 2 s / 8 s
    assert g.claim_plan(["sim"], CAP) == [(["sim"], 2)]


def test_errors_past_the_threshold_shrink_it_before_the_breaker_opens() -> None:
    clock = FakeClock()
    g = provider_gates(clock, backpressure_error_rate=0.2)
    boom = errors.ProviderRetryable("boom", status_code=500)
    for i in range(6):
        call(g, clock, f"ok{i}", took_s=0.1)
    for i in range(4):
        call(g, clock, f"bad{i}", took_s=0.1, error=boom)
    assert room(g) == 6  # error rate 0.4: 8 x 0.6 / 0.8
    gate = g.gate("sim")
    assert gate is not None and gate.breaker.state == gates.CLOSED
    for i in range(40):
        call(g, clock, f"worse{i}", took_s=0.1, error=boom)
    assert room(g) == 1  # never 0: the breaker alone stops claims


def test_rate_limits_and_fatal_errors_are_not_counted() -> None:
    clock = FakeClock()
    g = provider_gates(clock, backpressure_error_rate=0.1)
    for i in range(10):
        call(g, clock, f"f{i}", took_s=0.1, error=errors.ProviderFatal("bad request"))
    call(g, clock, "r", took_s=0.1, error=errors.ProviderRateLimited("429", retry_after_s=0))
    assert room(g) == CAP


def test_it_recovers_as_old_calls_leave_the_window() -> None:
    clock = FakeClock()
    g = provider_gates(clock, backpressure_latency_s=1.0)
    for i in range(10):
        call(g, clock, f"slow{i}", took_s=4.0)
    assert room(g) == 2
    clock.advance(health.WINDOW_S)
    assert room(g) == CAP  # nothing recent: nothing to judge
    for i in range(health.WINDOW_CALLS):
        call(g, clock, f"fast{i}", took_s=0.5)
    assert room(g) == CAP


def test_off_by_default() -> None:
    clock = FakeClock()
    g = provider_gates(clock)
    for i in range(20):
        call(g, clock, f"j{i}", took_s=600.0, error=errors.ProviderRetryable("x"))
    assert room(g) == CAP


@hypothesis.given(
    cap=st.integers(1, 1000),
    latencies=st.lists(st.floats(0, 1e6), min_size=0, max_size=60),
    failures=st.lists(st.booleans(), min_size=0, max_size=60),
    latency_s=st.floats(0.001, 1e4),
    error_rate=st.floats(0, 0.999),
)
def test_the_allowed_concurrency_stays_within_1_and_the_cap(
    cap: int, latencies: list[float], failures: list[bool], latency_s: float, error_rate: float
) -> None:
    clock = FakeClock()
    calls = health.CallHealth(clock=clock, latency_s=latency_s, error_rate=error_rate)
    for took_s, failed in zip(latencies, failures, strict=False):
        calls.add(latency_s=took_s, failed=failed)
    assert 1 <= calls.cap(cap) <= cap
