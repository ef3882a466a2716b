"""Shared SQL fragments: a rule that several statements apply lives in one block per dialect."""

from __future__ import annotations

import re

import pytest

from jobgate.domain import states
from jobgate.domain.states import JobState
from jobgate.storage import sql


def test_a_fragment_is_included_and_is_not_a_query() -> None:
    queries = sql.parse(
        "-- fragment: live\n-- d\nstate <> 'done'\n\n"
        "-- name: q\n-- d\nSELECT id FROM jobs WHERE {{live}} AND id = :id"
    )
    assert list(queries) == ["q"]
    assert queries["q"].sql == "SELECT id FROM jobs WHERE state <> 'done' AND id = :id"
    assert queries["q"].params == ("id",)


def test_an_unknown_fragment_is_an_error() -> None:
    with pytest.raises(ValueError, match="no fragment 'nope'"):
        sql.parse("-- name: q\n-- d\nSELECT {{nope}}")


def test_a_fragment_may_include_another() -> None:
    queries = sql.parse(
        "-- fragment: all\n-- d\nid, {{rest}}\n\n"
        "-- fragment: rest\n-- d\nstate\n\n"
        "-- name: q\n-- d\nSELECT {{all}} FROM jobs"
    )
    assert queries["q"].sql == "SELECT id, state FROM jobs"


def test_a_fragment_including_itself_is_an_error() -> None:
    with pytest.raises(ValueError, match="fragment 'a' includes itself"):
        sql.parse(
            "-- fragment: a\n-- d\nx {{b}}\n\n-- fragment: b\n-- d\ny {{a}}\n\n"
            "-- name: q\n-- d\nSELECT {{a}}"
        )


@pytest.mark.parametrize("package", ["jobgate.storage.sqlite", "jobgate.storage.postgres"])
def test_finish_and_settle_share_the_retry_after_cancel_rule(package: str) -> None:
    queries = sql.load(package)
    rule = "state = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NOT NULL THEN"
    for name in ("job_finish", "job_settle"):
        assert rule in " ".join(queries[name].sql.split()), name
        assert "{{" not in queries[name].sql


# -- job states in SQL come from the domain ------------------------------------------------------

_JOB_STATE = "|".join(state.value for state in JobState)
# A parenthesised list of two or more quoted job states, as `state IN (...)` would write it.
_HAND_LIST = re.compile(rf"\(\s*'(?:{_JOB_STATE})'(?:\s*,\s*'(?:{_JOB_STATE})')+\s*\)")


def test_the_domain_state_sets_are_fragments_in_the_enum_order() -> None:
    queries = sql.parse(
        "-- name: q\n-- d\nSELECT 1 WHERE a IN ({{live_states}}) OR b IN ({{terminal_states}})"
    )
    assert queries["q"].sql == (
        "SELECT 1 WHERE a IN ('queued', 'running') "
        "OR b IN ('succeeded', 'failed', 'cancelled', 'expired')"
    )
    assert states.in_order(states.TERMINAL_STATES)[0] is JobState.SUCCEEDED


def test_a_file_cannot_redefine_a_domain_fragment() -> None:
    with pytest.raises(ValueError, match="fragment live_states is the domain's"):
        sql.parse("-- fragment: live_states\n-- d\n'queued'\n\n-- name: q\n-- d\nSELECT 1")


@pytest.mark.parametrize("package", [*sql.DIALECTS, "shared"])
def test_no_statement_lists_job_states_by_hand(package: str) -> None:
    """A set of states (the live ones, the terminal ones) is the domain's fragment; only
    migrations, which are history and never change, keep theirs written out."""
    files = sql.shared_files() if package == "shared" else sql.dialect_files(package)
    assert files
    for name, text in files:
        found = _HAND_LIST.findall(text)
        assert not found, f"{name}: {found}"
