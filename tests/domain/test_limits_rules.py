from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobgate import errors
from jobgate.domain import limits
from jobgate.domain.fairness import Candidate, TenantQueue, fair_order

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def queue(tenant: str, running: int, count: int, *, weight: float = 1, free: int = 100):  # type: ignore[no-untyped-def]
    return TenantQueue(
        tenant, running, weight, free, tuple(Candidate(f"{tenant}{i}", 5, T0) for i in range(count))
    )


def test_fair_order_interleaves_and_respects_caps_and_weights() -> None:
    order = fair_order([queue("a", 0, 10), queue("b", 0, 10, weight=2)], 6)
    assert sorted(order) == sorted(["a0", "a1", "b0", "b1", "b2", "b3"])
    assert fair_order([queue("a", 0, 10, free=1), queue("b", 5, 10)], 3) == ["a0", "b0", "b1"]
    assert fair_order([], 5) == []


@pytest.mark.parametrize(
    ("endpoint", "body", "expected"),
    [
        ("/v1/chat/completions", {}, {"max_completion_tokens": 100}),
        ("/v1/chat/completions", {"max_tokens": 500}, {"max_tokens": 100}),
        ("/v1/chat/completions", {"max_completion_tokens": 50}, {"max_completion_tokens": 50}),
        ("/v1/responses", {"max_output_tokens": 900}, {"max_output_tokens": 100}),
        ("/v1/messages", {"max_tokens": 4096}, {"max_tokens": 100}),
        ("/v1/embeddings", {"x": 1}, {"x": 1}),
    ],
)
def test_output_tokens_are_clamped(
    endpoint: str, body: dict[str, int], expected: dict[str, int]
) -> None:
    assert limits.cap_output_tokens(endpoint, body, cap=100, mode="clamp") == expected


def test_output_tokens_rejected_in_reject_mode() -> None:
    with pytest.raises(errors.LimitExceeded) as caught:
        limits.cap_output_tokens("/v1/messages", {"max_tokens": 101}, cap=100, mode="reject")
    assert caught.value.limit == "max_output_tokens"
    assert limits.cap_output_tokens("/v1/messages", {"max_tokens": 10}, cap=100, mode="reject") == {
        "max_tokens": 10
    }
    assert limits.cap_output_tokens("/v1/messages", {}, cap=0, mode="reject") == {}


def test_allow_lists_name_the_limit() -> None:
    with pytest.raises(errors.LimitExceeded) as caught:
        limits.check_allowed(
            model="big", provider="sim", allowed_models=("small",), allowed_providers=()
        )
    assert caught.value.limit == "allowed_models"
    with pytest.raises(errors.LimitExceeded) as caught:
        limits.check_allowed(
            model="x", provider="openai", allowed_models=(), allowed_providers=("sim",)
        )
    assert caught.value.limit == "allowed_providers"
    limits.check_allowed(model="x", provider="sim", allowed_models=(), allowed_providers=())


@pytest.mark.parametrize(
    ("excess", "rate", "expected"),
    [(100, 10.0, 10), (1, 1000.0, 1), (10_000, 1.0, 120), (5, 0.0, 120), (5, None, 30)],
)
def test_retry_after_from_drain_rate(excess: int, rate: float | None, expected: int) -> None:
    assert limits.retry_after_s(excess=excess, drain_per_s=rate) == expected
