"""NewJob.queued builds its Job without Job's __init__ (domain.job.slot_builder), as prepare
builds its NewJob (new_job_of): the answer must be the record that __init__ makes, field for
field, whatever the values."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobgate.domain import job as job_module
from jobgate.domain.job import Job, NewJob
from jobgate.domain.states import JobState
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.records import SubmitOutcome

CREATED = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)


def test_queued_is_the_job_init_would_make() -> None:
    new = NewJob(
        id="job_1",
        tenant_id="ten_1",
        provider="sim",
        endpoint="/v1/chat/completions",
        model="sim-echo",
        request={"model": "sim-echo"},
        metadata={"n": 1},
        webhook={"url": "https://example.com/h", "event_types": []},
        api="responses",
        priority=7,
        max_attempts=4,
        start_timeout_s=30.0,
        execution_timeout_s=12.5,
        concurrency_key="k",
        model_route="alias",
    )
    run_at, expires_at = CREATED + timedelta(seconds=5), CREATED + timedelta(seconds=35)
    built = new.queued(
        created_at=CREATED, run_at=run_at, expires_at=expires_at, damaged=("run_at",)
    )
    expected = Job(
        id="job_1",
        tenant_id="ten_1",
        state=JobState.QUEUED,
        api="responses",
        provider="sim",
        endpoint="/v1/chat/completions",
        model="sim-echo",
        request=new.request,
        metadata=new.metadata,
        webhook=new.webhook,
        result=None,
        error=None,
        usage=None,
        priority=7,
        attempt=0,
        max_attempts=4,
        run_count=0,
        lost_count=0,
        run_at=run_at,
        created_at=CREATED,
        updated_at=CREATED,
        started_at=None,
        completed_at=None,
        cancel_requested_at=None,
        expires_at=expires_at,
        execution_timeout_s=12.5,
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
        damaged=("run_at",),
        concurrency_key="k",
        model_route="alias",
    )
    assert type(built) is Job
    assert built == expected
    for field in dataclasses.fields(Job):  # == would not tell 0 from False or 1 from True
        assert type(getattr(built, field.name)) is type(getattr(expected, field.name))


def test_the_builder_sets_every_field_in_order() -> None:
    names = [field.name for field in dataclasses.fields(Job)]
    built = job_module.job_of_fields(*names)  # each field holds its own name
    assert [getattr(built, name) for name in names] == names
    assert built == Job(**{name: name for name in names})  # type: ignore[arg-type]


def test_new_job_of_is_the_new_job_init_would_make() -> None:
    fields = dataclasses.fields(NewJob)
    values: list[Any] = [f"v{index}" for index, _ in enumerate(fields)]
    built = job_module.new_job_of(*values)
    expected = NewJob(*values)
    assert type(built) is NewJob and built == expected and hash(built) == hash(expected)
    assert [getattr(built, field.name) for field in fields] == values


@pytest.mark.parametrize("record", [Job, NewJob, SubmitOutcome, SubmitSpec], ids=str)
def test_a_slot_builder_answers_a_frozen_record_equal_to_init(record: type[Any]) -> None:
    """The record it makes is a `record` (not its twin): frozen, hashable, equal to
    record(*values), copyable by dataclasses.replace, and every field holds its value."""
    build: Callable[..., Any] = job_module.slot_builder(record)
    names = [field.name for field in dataclasses.fields(record)]
    values = [(name, index) for index, name in enumerate(names)]
    built = build(*values)
    assert type(built) is record and built.__class__ is record
    assert built == record(*values) and hash(built) == hash(record(*values))
    assert [getattr(built, name) for name in names] == values
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, names[0], "changed")
    moved = dataclasses.replace(built, **{names[0]: "other"})
    assert moved == record("other", *values[1:])
    with pytest.raises(TypeError):
        build(*values[1:])  # every value is given, none has a default


def test_a_slot_builder_refuses_what_it_cannot_build() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class Private:
        _a: int

    for record in (NoSlots, PostInit, Private):
        with pytest.raises(TypeError):
            job_module.slot_builder(record)


def test_a_slot_builder_of_some_fields_gives_the_others_their_defaults() -> None:
    plain = job_module.slot_builder(SubmitSpec, "endpoint", "body", "metadata", json_checked=True)
    body, metadata = {"model": "m"}, {"k": "v"}
    built = plain("/v1/chat/completions", body, metadata)
    expected = SubmitSpec("/v1/chat/completions", body, metadata=metadata, json_checked=True)
    assert type(built) is SubmitSpec and built == expected
    assert built.body is body and built.metadata is metadata
    bare = job_module.slot_builder(SubmitSpec, "endpoint", "body")
    first, second = bare("e", {}), bare("e", {})
    assert first == SubmitSpec("e", {}) and first.metadata is not second.metadata  # a factory
    for given in [("endpoint",), ("endpoint", "body", "nope")]:
        with pytest.raises(TypeError):  # `body` has no default; `nope` is no field
            job_module.slot_builder(SubmitSpec, *given)
    with pytest.raises(TypeError):
        job_module.slot_builder(SubmitSpec, "endpoint", "body", nope=1)


def test_a_record_builder_needs_a_value_for_every_field() -> None:
    values = {field.name: "None" for field in dataclasses.fields(SubmitOutcome)}
    assert job_module.record_builder(SubmitOutcome, (), values)() == SubmitOutcome(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
    )
    del values["replayed"]
    with pytest.raises(TypeError):
        job_module.record_builder(SubmitOutcome, (), values)
