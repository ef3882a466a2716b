"""domain.waiting: the claim's first objection wins, in the order the claim asks, with its
sentence and when it ends; a job nothing holds waits for its turn or for nothing."""

from __future__ import annotations

import dataclasses

import pytest

from jobgate.domain import waiting
from jobgate.domain.waiting import CapFact, PauseFact, WaitFacts

NOW = 1_900_000_000.0
FREE = WaitFacts(now=NOW, run_at=NOW - 5, provider="sim", queue_position=1)

# Each reason's fact alone, in the order of waiting.REASONS (but `queue`).
HOLDING: dict[str, dict[str, object]] = {
    "scheduled": {"run_at": NOW + 60},
    "paused": {"pause": PauseFact("pause_1", "incident")},
    "no_worker": {"no_worker": "no worker has ever run"},
    "budget_exhausted": {"over_budget_until": NOW + 3600},
    "breaker_open": {"breaker_open_until": NOW + 30},
    "rate_limited": {"rate_limited_s": 2.5},
    "tenant_cap": {"tenant_cap": CapFact(3, 3)},
    "key_cap": {"key_cap": CapFact(1, 1, "user-1")},
}


def test_nothing_holds_the_first_in_line() -> None:
    assert waiting.explain(FREE) is None


def test_the_rest_of_the_line_waits_its_turn() -> None:
    behind = waiting.explain(dataclasses.replace(FREE, queue_position=4))
    assert behind == waiting.Waiting("queue", "3 jobs of its tenant are ahead of it in the queue")
    unknown = waiting.explain(dataclasses.replace(FREE, queue_position=None))
    assert unknown is not None and unknown.reason == "queue"


def test_a_floor_of_a_place_is_never_first() -> None:
    """A place walked to its bound is a floor: 1 then says only that no claimable job was among
    those walked, so the job is not first (it waits its turn), and 101 reads "at least 100"."""
    floor = waiting.explain(dataclasses.replace(FREE, queue_position_exact=False))
    assert floor is not None and floor.reason == "queue"
    deep = waiting.explain(
        dataclasses.replace(FREE, queue_position=101, queue_position_exact=False)
    )
    assert deep == waiting.Waiting(
        "queue", "at least 100 jobs of its tenant are ahead of it in the queue"
    )


def test_every_reason_but_queue_has_a_fact() -> None:
    assert (*HOLDING, "queue") == waiting.REASONS


@pytest.mark.parametrize("reason", list(HOLDING))
def test_each_fact_alone_is_its_reason(reason: str) -> None:
    found = waiting.explain(dataclasses.replace(FREE, **HOLDING[reason]))  # type: ignore[arg-type]
    assert found is not None and found.reason == reason and found.detail


@pytest.mark.parametrize("index", range(len(HOLDING)))
def test_the_first_reason_in_claim_order_wins(index: int) -> None:
    reasons = list(HOLDING)[index:]
    facts: dict[str, object] = {}
    for reason in reasons:
        facts |= HOLDING[reason]
    found = waiting.explain(dataclasses.replace(FREE, **facts))  # type: ignore[arg-type]
    assert found is not None and found.reason == reasons[0]


def test_until_says_when_a_wait_ends_by_itself() -> None:
    def until(**facts: object) -> float | None:
        found = waiting.explain(dataclasses.replace(FREE, **facts))  # type: ignore[arg-type]
        assert found is not None
        return found.until

    assert until(run_at=NOW + 60) == NOW + 60
    assert until(over_budget_until=NOW + 3600) == NOW + 3600
    assert until(breaker_open_until=NOW + 30) == NOW + 30
    assert until(rate_limited_s=2.5) == NOW + 2.5
    assert until(provider_paused_s=7) == NOW + 7  # a 429's Retry-After, per process
    assert until(pause=PauseFact("pause_1", None)) is None
    assert until(tenant_cap=CapFact(3, 3)) is None


def test_the_view_rounds_until_up_to_whole_seconds() -> None:
    held = waiting.Waiting("rate_limited", "slow down", NOW + 2.1)
    assert held.view() == {"reason": "rate_limited", "detail": "slow down", "until": NOW + 3}
    assert waiting.Waiting("paused", "x").view()["until"] is None


def test_sentences_name_what_holds_the_job() -> None:
    paused = waiting.explain(dataclasses.replace(FREE, pause=PauseFact("pause_9", "deploy")))
    assert paused is not None and "pause_9" in paused.detail and "deploy" in paused.detail
    key = waiting.explain(dataclasses.replace(FREE, key_cap=CapFact(2, 2, "user-1")))
    assert key is not None and "'user-1'" in key.detail and "2" in key.detail
    limited = waiting.explain(dataclasses.replace(FREE, provider_paused_s=9))
    assert limited is not None and "429" in limited.detail
