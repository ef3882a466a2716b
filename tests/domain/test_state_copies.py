"""The job states written out where the domain cannot be imported (the client SDK, which ships
alone) or where a literal is the declaration (the API schema) are held to `JobState` here, and
the modules that name states beside the domain (the worker, the console) take them from it."""

from __future__ import annotations

import ast
import pathlib
import re
import typing

import jobgate
from jobgate import storage
from jobgate.cli import client_verbs
from jobgate.client import models as client_models
from jobgate.domain import states
from jobgate.domain.states import JobState
from jobgate.http.schemas import native as http_models
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


# The outbox's deliveries have a `state` of their own (migration 0001: pending | succeeded |
# failed); every other `state` column is a job's.
_OUTBOX_STATES = {"pending", "succeeded", "failed"}
_SQL = pathlib.Path(storage.__file__).parent
_COMPARED = re.compile(r"\b(?:\w+\.)?(?:from_|to_)?state\s*(?:=|<>|!=)\s*'(\w+)'")
_LISTED = re.compile(r"\b(?:\w+\.)?(?:from_|to_)?state\s+(?:NOT\s+)?IN\s*\(\s*('[^)]*)\)", re.I)


def _state_literals(text: str) -> set[str]:
    found = set(_COMPARED.findall(text))
    for listed in _LISTED.findall(text):
        found.update(re.findall(r"'(\w+)'", listed))
    return found


def test_sql_compares_states_only_with_the_domains_values() -> None:
    """SQL keeps single state literals (`state = 'queued'`, an index's predicate, a CHECK);
    each one is a JobState value, or an outbox delivery's state."""
    allowed = {state.value for state in JobState} | _OUTBOX_STATES
    found = {
        str(path.relative_to(_SQL)): _state_literals(path.read_text())
        for path in sorted(_SQL.rglob("*.sql"))
    }
    assert {name: sorted(seen - allowed) for name, seen in found.items() if seen - allowed} == {}
    assert set().union(*found.values()) >= {state.value for state in JobState}


def test_the_sql_state_scan_sees_comparisons_and_lists() -> None:
    text = "WHERE j.state = 'queud' AND e.to_state <> 'running' AND state IN ('failed',\n 'x')"
    assert _state_literals(text) == {"queud", "running", "failed", "x"}


# Modules that write a job's state where a reader sees it (a log line's `from_state`, a metric's
# outcome, the console's chart keys, an attempt's outcome, a jobs-list filter): each takes it
# from JobState, so a state renamed in the domain cannot leave them behind.
_SRC = pathlib.Path(jobgate.__file__).parent
_STATE_USERS = [_SRC / "roles" / "worker.py", *sorted((_SRC / "http" / "console").glob("*.py"))]


def _state_strings(source: str) -> list[tuple[int, str]]:
    """The string constants of `source` spelling a job state, as (line, value). A dict's key
    and a subscript's key are names, not states (a batch's `request_counts["failed"]`, the
    console's `totals` keys), and so are docstrings."""
    tree = ast.parse(source)
    names: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            names.update(id(key) for key in node.keys if key is not None)
        elif isinstance(node, ast.Subscript):
            names.add(id(node.slice))
        elif isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                names.add(id(first.value))
    values = {state.value for state in JobState}
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value in values
        and id(node) not in names
    )


def test_the_worker_and_the_console_take_states_from_the_domain() -> None:
    assert any(path.name == "views.py" for path in _STATE_USERS)
    found = {str(path.relative_to(_SRC)): _state_strings(path.read_text()) for path in _STATE_USERS}
    assert {name: seen for name, seen in found.items() if seen} == {}


def test_the_state_string_scan_sees_values_not_names() -> None:
    source = (
        '"""running"""\n'
        'log = {"from_state": "running", "queued": 1}\n'
        'line = Line("succeeded", counts["failed"])\n'
        'row = Attempt(outcome="expired" if x else "cancelled", reason="failed_twice")\n'
    )
    assert _state_strings(source) == [
        (2, "running"), (3, "succeeded"), (4, "cancelled"), (4, "expired")
    ]  # fmt: skip
