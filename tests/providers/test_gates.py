"""Per-provider backpressure, deterministic on a fake clock: the circuit breaker's states and
the claim plan that keeps a held-back provider's jobs in the queue."""

from __future__ import annotations

import logging

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers import gates
from jobgate.testing import FakeClock


def breaker(clock: FakeClock) -> gates.CircuitBreaker:
    return gates.CircuitBreaker(failure_threshold=3, reset_s=10, clock=clock)


def test_opens_after_consecutive_failures_only() -> None:
    clock = FakeClock()
    b = breaker(clock)
    b.failed()
    b.failed()
    b.succeeded()  # a success in between resets the count
    b.failed()
    b.failed()
    assert b.state == gates.CLOSED and b.admits(5) == 5
    b.failed()
    assert b.state == gates.OPEN and b.admits(5) == 0


def test_half_open_lets_one_probe_through() -> None:
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(3):
        b.failed()
    clock.advance(10)
    assert b.state == gates.HALF_OPEN and b.admits(5) == 1
    b.started("job_probe")
    assert b.admits(5) == 0  # one probe at a time
    b.succeeded()
    assert b.state == gates.CLOSED and b.admits(5) == 5


def test_a_failed_probe_doubles_the_wait() -> None:
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(3):
        b.failed()
    clock.advance(10)
    b.started("job_probe")
    b.failed()
    assert b.state == gates.OPEN
    clock.advance(10)
    assert b.state == gates.OPEN  # now 20 s
    clock.advance(10)
    assert b.state == gates.HALF_OPEN


def test_an_abandoned_probe_frees_the_slot() -> None:
    clock = FakeClock()
    b = breaker(clock)
    for _ in range(3):
        b.failed()
    clock.advance(10)
    b.started("job_probe")
    b.abandoned("job_probe")
    assert b.admits(1) == 1


def test_rate_limit_pauses_until_retry_after() -> None:
    clock = FakeClock()
    b = breaker(clock)
    b.rate_limited(30)
    assert b.admits(4) == 0 and b.state == gates.CLOSED
    clock.advance(30)
    assert b.admits(4) == 4


def test_claim_plan() -> None:
    clock = FakeClock()
    board = gates.ProviderGates(
        {
            "a": ProviderConfig(kind="sim", breaker_failure_threshold=1),
            "b": ProviderConfig(kind="sim", concurrency=2),
            "c": ProviderConfig(kind="sim"),
        },
        clock=clock,
    )
    assert board.claim_plan(None, 2) == [(None, 2)]  # nothing held back: one claim as before
    assert board.claim_plan(None, 8) == [(["a", "c"], 8), (["b"], 2)]  # b's cap is 2
    board.record("a", "job_1", errors.ProviderRetryable("boom"))  # a's breaker opens
    board.started("b", "job_2")  # b has one of its two slots left
    assert board.claim_plan(None, 8) == [(["c"], 8), (["b"], 1)]
    assert board.claim_plan(["a"], 8) == []
    board.finished("b", "job_2")
    board.record("a", "job_3", errors.ProviderFatal("bad request"))  # says a is healthy
    assert board.claim_plan(None, 2) == [(None, 2)]


def test_how_long_a_breaker_holds_calls_back() -> None:
    clock = FakeClock()
    b = breaker(clock)
    assert b.open_left_s() is None and b.paused_left_s() == 0
    for _ in range(3):
        b.failed()
    clock.advance(4)
    assert b.open_left_s() == 6
    clock.advance(6)
    assert b.open_left_s() is None  # half-open: the next claim sends the probe
    b.started("job_probe")
    assert b.open_left_s() == 0
    b.succeeded()
    b.rate_limited(30)
    assert b.open_left_s() is None and b.paused_left_s() == 30 and b.admits(5) == 0
    b.shared(12)  # another process opened it
    assert b.open_left_s() == 12


def test_a_breaker_opening_and_closing_is_logged_with_the_provider_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    config = ProviderConfig(kind="sim", breaker_failure_threshold=2, breaker_reset_s=30)
    held = gates.ProviderGates({"sim": config}, clock=clock)
    failure = errors.ProviderRetryable("upstream 500", code="server_error")
    with caplog.at_level(logging.WARNING, logger="jobgate.providers.gates"):
        held.record("sim", "job_1", failure)
        assert caplog.records == []  # one failure opens nothing
        held.record("sim", "job_2", failure)
        (opened,) = caplog.records
        assert opened.levelno == logging.WARNING
        assert opened.provider == "sim" and opened.reason == "consecutive_failures"  # type: ignore[attr-defined]
        assert "server_error" in opened.getMessage() and "sim" in opened.getMessage()
        caplog.clear()
        clock.advance(30)
        held.started("sim", "job_probe")
        held.record("sim", "job_probe", failure)
        (reopened,) = caplog.records
        assert reopened.reason == "probe_failed"  # type: ignore[attr-defined]
        caplog.clear()
        clock.advance(60)
        held.started("sim", "job_probe_2")
        held.record("sim", "job_probe_2", None)
        (closed,) = caplog.records
        assert "closed" in closed.getMessage() and closed.provider == "sim"  # type: ignore[attr-defined]
