"""The job's wire shape is written twice: `models.JobOut` (what /openapi.json promises) and
`views.job_view` (what the API sends). They must never differ: every member the view renders
is declared by JobOut, every member JobOut declares is rendered (or added by http.job_notes),
and every rendered job, in every state, with optional fields empty or filled, validates."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from datetime import UTC, datetime, timedelta
from typing import Any

import pydantic
import pytest

from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.http import job_notes
from jobgate.http.schemas.native import JobOut
from jobgate.http.views import job_view

# http.job_notes adds these on GET /v1/jobs/{id}: a queued job's place in line, a streaming
# job's tokens so far, and a note on what holds a job up (no reconciler, a rate limit).
ADDED_BY_NOTES = {"queue_position", "queue_position_exact", "output_tokens", "note", "waiting"}


class StrictJobOut(JobOut):
    """JobOut refusing members it does not declare (JobOut itself ignores them)."""

    model_config = pydantic.ConfigDict(extra="forbid", strict=True)


T0 = datetime(2030, 1, 1, tzinfo=UTC)


def bare_job(state: JobState) -> Job:
    return Job(
        id="job_1",
        tenant_id="ten_1",
        state=state,
        api="jobs",
        provider="sim",
        endpoint="/v1/chat/completions",
        model=None,
        request=None,
        metadata={},
        webhook=None,
        result=None,
        error=None,
        usage=None,
        priority=5,
        attempt=0,
        max_attempts=3,
        run_count=0,
        lost_count=0,
        run_at=T0,
        created_at=T0,
        updated_at=T0,
        started_at=None,
        completed_at=None,
        cancel_requested_at=None,
        expires_at=None,
        execution_timeout_s=None,
        deadline_at=None,
        lease_owner=None,
        lease_token=None,
        lease_expires_at=None,
        phase=None,
        provider_job_id=None,
        creation_outcome=None,
        cancel_outcome=None,
        reconcile_at=None,
        dead_lettered=False,
        purged_at=None,
        event_seq=1,
    )


def full_job(state: JobState) -> Job:
    later = T0 + timedelta(seconds=5)
    return dataclasses.replace(
        bare_job(state),
        model="sim-echo",
        request={"model": "sim-echo"},
        metadata={"team": "a"},
        result={"choices": []},
        error={"code": "server_error", "message": "boom", "type": "provider_error"},
        usage={"input_tokens": 3},
        attempt=2,
        started_at=later,
        completed_at=later,
        cancel_requested_at=later,
        expires_at=later,
        phase="awaiting_provider",
        provider_job_id="batch_1",
        creation_outcome="created",
        cancel_outcome="cancelled",
        dead_lettered=True,
        purged_at=later,
        concurrency_key="user-1",
        reconciled_at=later,
        progress=0.5,
        provider_request_id="req_1",
    )


def test_the_view_renders_exactly_the_members_jobout_declares() -> None:
    rendered = set(job_view(bare_job(JobState.QUEUED)))
    declared = set(JobOut.model_fields)
    assert rendered - declared == set(), "rendered but not in /openapi.json"
    assert declared - rendered == ADDED_BY_NOTES, "declared but never rendered"


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("make", [bare_job, full_job], ids=["empty", "filled"])
def test_every_rendered_job_validates_against_jobout(state: JobState, make: Any) -> None:
    view = job_view(make(state))
    checked = StrictJobOut.model_validate(view)
    # Nothing is coerced on the way: what JobOut reads back is what was rendered.
    assert checked.model_dump(exclude=ADDED_BY_NOTES) == view


def _members_job_notes_sets() -> set[str]:
    """Every `view["member"] = …` that http.job_notes writes."""
    tree = ast.parse(inspect.getsource(job_notes))
    return {
        target.slice.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Name)
        and target.value.id == "view"
        and isinstance(target.slice, ast.Constant)
        and isinstance(target.slice.value, str)
    }


def test_what_job_notes_adds_is_declared_by_jobout() -> None:
    added = _members_job_notes_sets()
    assert added - set(JobOut.model_fields) == set(), "added on GET but not in /openapi.json"
    assert ADDED_BY_NOTES <= added, "ADDED_BY_NOTES names a member job_notes no longer adds"


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING])
def test_an_annotated_job_validates_against_jobout(state: JobState) -> None:
    view = {
        **job_view(full_job(state)),
        "queue_position": 3,
        "queue_position_exact": True,
        "output_tokens": 120,
        "phase": "rate_limited",
        "note": "waiting for the shared rate limit of sim (~2 s)",
        "waiting": {
            "reason": "rate_limited",
            "detail": "waiting for the shared rate limit of sim (~2 s)",
            "until": 1_900_000_002,
        },
    }
    checked = StrictJobOut.model_validate(view)
    assert checked.model_dump() == view
