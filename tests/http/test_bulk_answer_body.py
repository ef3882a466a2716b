"""The bulk route's answer, encoded once per job shape (bulk_submit_routes.answer_body), is
byte for byte the answer of viewing every item (`orjson.dumps` of `_item_view` per item)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.http.routes import submit_many as routes
from jobgate.services.submit_many import ItemResult
from jobgate.storage.records import SubmitOutcome

T0 = datetime(2026, 12, 3, 9, 0, 0, 123456, tzinfo=UTC)


def make_job(number: int = 1, **fields: Any) -> Job:
    values: dict[str, Any] = {
        "id": f"job_{number:016d}",
        "tenant_id": "ten_1",
        "state": JobState.QUEUED,
        "api": "jobs",
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "request": {"model": "sim-echo"},
        "metadata": {},
        "webhook": None,
        "result": None,
        "error": None,
        "usage": None,
        "priority": 5,
        "attempt": 0,
        "max_attempts": 3,
        "run_count": 0,
        "lost_count": 0,
        "run_at": T0,
        "created_at": T0,
        "updated_at": T0,
        "started_at": None,
        "completed_at": None,
        "cancel_requested_at": None,
        "expires_at": None,
        "execution_timeout_s": None,
        "deadline_at": None,
        "lease_owner": None,
        "lease_token": None,
        "lease_expires_at": None,
        "phase": None,
        "provider_job_id": None,
        "creation_outcome": None,
        "cancel_outcome": None,
        "reconcile_at": None,
        "dead_lettered": False,
        "purged_at": None,
        "event_seq": 1,
    }
    values.update(fields)
    return Job(**values)


def created(job: Job, replayed: bool = False) -> SubmitOutcome:
    return SubmitOutcome(job, replayed, 202)


def old_answer(results: list[ItemResult]) -> bytes:
    """main's answer: every item viewed, the list encoded at once."""
    data = [routes._item_view(result) for result in results]
    return orjson.dumps({"object": "list", "data": data})


def assert_same(results: list[ItemResult]) -> None:
    assert routes.answer_body(results) == old_answer(results)


def test_the_usual_call_many_jobs_of_one_shape() -> None:
    assert_same([created(make_job(n)) for n in range(500)])


def test_empty_and_only_refusals() -> None:
    assert_same([])
    assert_same(
        [
            errors.InvalidRequest("jobs[0] must be an object"),
            errors.InvalidRequest("bad", param="idempotency_key", code="invalid_idempotency_key"),
            errors.NotFound("job", "job_1"),
        ]
    )


VARIANTS: list[dict[str, Any]] = [
    {"state": JobState.RUNNING},
    {"provider": "openai"},
    {"endpoint": "/v1/embeddings"},
    {"model": None},
    {"model": "é" * 256},
    {"created_at": T0 + timedelta(seconds=1)},
    {"created_at": T0 + timedelta(microseconds=1)},  # the same second: the same view
    {"created_at": T0.astimezone(timezone(timedelta(hours=5)))},  # the same instant
    {"created_at": T0.replace(tzinfo=None)},  # naive: local time
    {"started_at": T0},
    {"completed_at": T0},
    {"cancel_requested_at": T0},
    {"expires_at": T0 + timedelta(days=30)},
    {"expires_at": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)},
    {"attempt": 1},
    {"attempt": True},
    {"attempt": 2**63 - 1},
    {"max_attempts": 1},
    {"priority": 0},
    {"priority": -(2**63)},
    {"priority": 5.0},
    {"phase": "submitted"},
    {"provider_job_id": "p-1"},
    {"provider_request_id": "r-1"},
    {"creation_outcome": "created"},
    {"cancel_outcome": "cancelled"},
    {"progress": 0.0},
    {"progress": -0.0},
    {"progress": 0},
    {"progress": 0.5},
    {"run_at": T0 + timedelta(seconds=60)},
    {"concurrency_key": "k"},
    {"reconciled_at": T0},
    {"result": {"a": 1, "b": 2}},
    {"result": {"b": 2, "a": 1}},
    {"error": {"code": "x", "message": "y"}},
    {"usage": {"total_tokens": 1}},
    {"metadata": {"a": "1", "b": "2"}},
    {"metadata": {"b": "2", "a": "1"}},
    {"metadata": {"a": 1}},
    {"metadata": {"a": 1.0}},
    {"metadata": {"a": True}},
    {"metadata": {"a": [1, {"b": None}], "c": "\u2028\x00"}},
    {"dead_lettered": True},
    {"dead_lettered": 0},
    {"purged_at": T0},
    # Fields job_view does not show: the same view (and the same shape or not: either is right)
    {"tenant_id": "ten_2"},
    {"request": {"model": "other"}},
    {"run_count": 4},
    {"updated_at": T0 + timedelta(hours=1)},
    {"event_seq": 9},
]


@pytest.mark.parametrize("fields", VARIANTS, ids=lambda f: repr(f)[:60])
def test_a_job_differing_in_one_member(fields: dict[str, Any]) -> None:
    base = [created(make_job(n)) for n in range(3)]
    odd = created(make_job(10, **fields))
    assert_same([*base, odd, *base, odd, created(make_job(11, **fields))])
    assert_same([odd, *base])


def test_every_variant_together_and_replays_and_refusals() -> None:
    results: list[ItemResult] = []
    for number, fields in enumerate(VARIANTS):
        results.append(created(make_job(number, **fields)))
        results.append(created(make_job(1000 + number, **fields), replayed=True))
        results.append(errors.InvalidRequest(f"jobs[{number}] must be an object"))
        results.append(created(make_job(2000 + number)))
    assert_same(results)


def test_ids_that_need_escaping() -> None:
    jobs = [created(make_job(id=job_id)) for job_id in ('job_"1', "job_\\", "job_\u00e9", "")]
    assert_same([*jobs, created(make_job(1))])


def test_a_member_orjson_cannot_encode_is_refused_as_before() -> None:
    odd = created(make_job(1, metadata={1: "non-str key"}))
    with pytest.raises(orjson.JSONEncodeError):
        old_answer([odd])
    with pytest.raises(orjson.JSONEncodeError):
        routes.answer_body([created(make_job(2)), odd])


def test_shape_covers_every_member_job_view_shows() -> None:
    """A member added to job_view but not to the shape would answer one job's value for
    another's: any member that changes the view (but the id) changes the shape."""
    base = make_job(1)
    view = routes._item_view(created(base))
    for field in dataclasses.fields(Job):
        value = getattr(base, field.name)
        other: Any = "x" if value is None or isinstance(value, str) else None
        if isinstance(value, datetime):
            other = value + timedelta(days=1)
        changed = dataclasses.replace(base, **{field.name: other})
        try:
            changed_view = routes._item_view(created(changed))
        except (AttributeError, TypeError, ValueError):
            continue
        if field.name != "id" and changed_view != view:
            assert routes._shape(changed) != routes._shape(base), field.name
