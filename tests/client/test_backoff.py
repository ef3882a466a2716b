"""The client's retry schedule: full jitter from 1 s, capped at 30 s, floored by Retry-After."""

from __future__ import annotations

import random

import pytest

from jobgate.client.backoff import Backoff, full_jitter_s


def ceiling(attempt: int) -> float:
    return min(30.0, 2.0 ** (attempt - 1))


@pytest.mark.parametrize("seed", range(50))
def test_every_delay_is_within_the_full_jitter_bounds(seed: int) -> None:
    backoff = Backoff(random.Random(seed))
    for attempt in range(1, 16):
        delay = backoff.next_delay_s()
        assert 0.0 <= delay <= ceiling(attempt), (attempt, delay)


def test_the_bounds_are_used_in_full_not_just_respected() -> None:
    # Full jitter draws from the whole [0, ceiling] range: across seeds, each attempt's delays
    # reach near its ceiling and near zero (a constant or "equal jitter" schedule would not).
    for attempt in range(1, 10):
        delays = [
            full_jitter_s(attempt, random.Random(seed), base_s=1.0, cap_s=30.0)
            for seed in range(400)
        ]
        assert max(delays) > 0.9 * ceiling(attempt)
        assert min(delays) < 0.1 * ceiling(attempt)


def test_the_cap_holds_however_many_attempts() -> None:
    backoff = Backoff(random.Random(1))
    delays = [backoff.next_delay_s() for _ in range(200)]
    assert max(delays) <= 30.0
    assert max(delays[10:]) > 25.0  # and it is reached


def test_a_seed_reproduces_the_schedule() -> None:
    first = Backoff(random.Random(42))
    second = Backoff(random.Random(42))
    assert [first.next_delay_s() for _ in range(10)] == [second.next_delay_s() for _ in range(10)]


@pytest.mark.parametrize("seed", range(20))
def test_retry_after_is_a_floor(seed: int) -> None:
    backoff = Backoff(random.Random(seed))
    reference = Backoff(random.Random(seed))
    for retry_after in (7.0, 0.5, 3.0, 20.0, 45.0, 1.0):
        jitter = reference.next_delay_s()
        delay = backoff.next_delay_s(retry_after)
        assert delay >= retry_after
        assert delay == max(jitter, retry_after)  # never later than needed either


def test_reset_starts_again_from_one_second() -> None:
    backoff = Backoff(random.Random(3))
    for _ in range(8):
        backoff.next_delay_s()
    backoff.reset()
    assert backoff.next_delay_s() <= 1.0
    assert backoff.attempt == 1


def test_attempts_are_one_based() -> None:
    with pytest.raises(ValueError):
        full_jitter_s(0, random.Random(), base_s=1.0, cap_s=30.0)
