"""The soak's verdict on a job that did not end: a queued job whose `waiting` names a time still
ahead (an open breaker, a rate limit, a pause with an end) is late, not stuck."""

from __future__ import annotations

from typing import Any

from bench import soak_diagnosis

NOW = 1_000_000.0


def queued(**changes: Any) -> dict[str, Any]:
    row = {"state": "queued", "event_seq": 3, "run_at": NOW - 60, "now": NOW, "lease_owner": None}
    return row | changes


def verdict(wait: Any, moved: int = 0) -> str:
    row = queued()
    turn = soak_diagnosis._turn(wait, moved, 0, row["now"])
    return soak_diagnosis._verdict(row, row, lambda _owner: "-", turn)


def test_a_job_behind_an_open_breaker_is_late_until_the_breaker_may_close() -> None:
    breaker = {"reason": "breaker_open", "detail": "...", "until": NOW + 25}
    assert verdict(breaker) == "late: waits 25.0 s more (breaker_open)"
    assert verdict(breaker | {"until": NOW - 1}).startswith("stuck: queued and due")


def test_a_job_waiting_its_turn_is_late_only_when_the_line_moved() -> None:
    turn = {"reason": "queue", "detail": "...", "until": None}
    assert verdict(turn, moved=4).startswith("late: waits its turn (queue)")
    assert verdict(turn, moved=0).startswith("stuck:")
    assert verdict(None).startswith("stuck:")


def test_a_jobs_publication_says_whether_it_is_deferred() -> None:
    row = queued(
        phase=None,
        attempt=1,
        to_state=None,
        lease_expires_at=None,
        provider_job_id=None,
        concurrency_key=None,
        published_count=3,
        republish_at=NOW + 2,
        deferred=True,
    )
    described = soak_diagnosis._describe(row, lambda _owner: "-")
    assert described.endswith("published 3x (deferred), again in 2.0 s")
    in_broker = soak_diagnosis._describe(row | {"deferred": False}, lambda _owner: "-")
    assert in_broker.endswith("published 3x, again in 2.0 s")
