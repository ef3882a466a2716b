"""The job states written out where the domain cannot be imported (the client SDK, which ships
alone) or where a literal is the declaration (the API schema) are held to `JobState` here."""

from __future__ import annotations

import typing

from jobgate.cli import client_verbs
from jobgate.client import models as client_models
from jobgate.domain import states
from jobgate.domain.states import JobState
from jobgate.http import models as http_models
from tests.support import audit


def test_live_states_are_the_non_terminal_ones() -> None:
    assert states.LIVE_STATES == (JobState.QUEUED, JobState.RUNNING)
    assert set(states.LIVE_STATES).isdisjoint(states.TERMINAL_STATES)
    assert set(states.LIVE_STATES) | states.TERMINAL_STATES == set(JobState)


def test_the_api_schema_names_every_state_in_order() -> None:
    status = http_models.JobOut.model_fields["status"].annotation
    assert typing.get_args(status) == tuple(state.value for state in JobState)


def test_the_client_names_the_same_states_and_terminal_ones() -> None:
    assert [s.value for s in client_models.JobStatus] == [s.value for s in JobState]
    assert client_models.TERMINAL_STATUSES == {s.value for s in states.TERMINAL_STATES}


def test_the_cli_has_an_exit_code_for_each_terminal_state() -> None:
    assert set(client_verbs.EXIT_FOR_STATUS) == {s.value for s in states.TERMINAL_STATES}


def test_the_audit_reads_terminal_states_from_the_domain() -> None:
    assert set(audit.TERMINAL) == {s.value for s in states.TERMINAL_STATES}
