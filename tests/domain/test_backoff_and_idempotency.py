from __future__ import annotations

import random

import pytest

from jobgate.domain import events, idempotency
from jobgate.domain.backoff import full_jitter_s
from jobgate.domain.states import JobState


@pytest.mark.parametrize("attempt", range(1, 12))
def test_full_jitter_stays_within_bounds(attempt: int) -> None:
    rng = random.Random(attempt)
    ceiling = min(60.0, 2.0 * 2 ** (attempt - 1))
    delays = [full_jitter_s(attempt, base_s=2.0, cap_s=60.0, rng=rng) for _ in range(500)]
    assert all(0.0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling * 0.8  # it does use the whole range
    assert min(delays) < ceiling * 0.2


def test_full_jitter_rejects_zero_attempt() -> None:
    with pytest.raises(ValueError):
        full_jitter_s(0, base_s=1, cap_s=1)


def test_body_hash_ignores_key_order_and_whitespace() -> None:
    assert idempotency.body_hash({"a": 1, "b": [1, 2]}) == idempotency.body_hash(
        {"b": [1, 2], "a": 1}
    )
    assert idempotency.body_hash({"a": 1}) != idempotency.body_hash({"a": 2})


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("k", True),
        ("x" * 255, True),
        ("", False),
        ("x" * 256, False),
        ("tab\there", False),
        ("é", False),
        ("op_42 ~!", True),
    ],
)
def test_idempotency_key_validation(key: str, valid: bool) -> None:
    assert idempotency.key_is_valid(key) is valid


def test_event_types() -> None:
    assert events.event_type_for("jobs", JobState.SUCCEEDED) == "job.succeeded"
    assert events.event_type_for("jobs", JobState.QUEUED) is None
    assert events.event_type_for("responses", JobState.SUCCEEDED) == "response.completed"
    assert events.event_type_for("responses", JobState.EXPIRED) == "response.cancelled"
