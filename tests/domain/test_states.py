"""The transition table over every (state, state) pair."""

from __future__ import annotations

import itertools

import pytest

from jobgate.domain.states import (
    TERMINAL_STATES,
    InvalidTransition,
    JobState,
    Verdict,
    transition,
)

Q, R, S, F, C, E = (
    JobState.QUEUED,
    JobState.RUNNING,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.EXPIRED,
)

# (source, target) -> what transition() answers without a redrive: APPLY, IGNORE or raise.
EXPECTED = {
    (Q, Q): Verdict.IGNORE, (Q, R): Verdict.APPLY, (Q, S): InvalidTransition,
    (Q, F): InvalidTransition, (Q, C): Verdict.APPLY, (Q, E): Verdict.APPLY,
    (R, Q): Verdict.APPLY, (R, R): Verdict.IGNORE, (R, S): Verdict.APPLY, (R, F): Verdict.APPLY,
    (R, C): Verdict.APPLY, (R, E): InvalidTransition,
}  # fmt: skip
for terminal, target in itertools.product(TERMINAL_STATES, JobState):
    EXPECTED[(terminal, target)] = Verdict.IGNORE


def test_every_pair_is_specified() -> None:
    assert set(EXPECTED) == set(itertools.product(JobState, JobState))


@pytest.mark.parametrize(("source", "target"), sorted(EXPECTED, key=str))
def test_transition(source: JobState, target: JobState) -> None:
    expected = EXPECTED[(source, target)]
    if expected is InvalidTransition:
        with pytest.raises(InvalidTransition):
            transition(source, target)
    else:
        assert transition(source, target) is expected


@pytest.mark.parametrize("target", list(JobState))
def test_redrive_only_moves_failed_to_queued(target: JobState) -> None:
    expected = Verdict.APPLY if target is Q else None
    if target is F:
        assert transition(F, target, redrive=True) is Verdict.IGNORE
    elif expected is None:
        with pytest.raises(InvalidTransition):
            transition(F, target, redrive=True)
    else:
        assert transition(F, target, redrive=True) is expected


@pytest.mark.parametrize("source", sorted(TERMINAL_STATES))
def test_terminal_states_are_immutable(source: JobState) -> None:
    for target in JobState:
        assert transition(source, target) is Verdict.IGNORE


def test_exactly_four_terminal_states() -> None:
    assert {s for s in JobState if s.terminal} == {S, F, C, E}


@pytest.mark.parametrize("source", [s for s in JobState if s is not F])
def test_only_a_failed_job_can_be_redriven(source: JobState) -> None:
    with pytest.raises(InvalidTransition):
        transition(source, Q, redrive=True)
