"""job.fast_init: the records built once or more per job (by the worker; NewJob by every
submit) get an __init__ that sets each slot through its descriptor; it must take the same
arguments and build the same record as the frozen dataclass's own __init__."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from jobgate.domain.job import Lease, NewJob, fast_init
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.providers.base import ProviderCall, ProviderResult, Usage

FAST = [Lease, Finish, ProviderCall, ProviderResult, Usage, NewJob]


def _sample(field: dataclasses.Field[Any], index: int) -> Any:
    return f"value-{index}" if field.default is dataclasses.MISSING else ("other", index)


@pytest.mark.parametrize("record", FAST, ids=lambda record: record.__name__)
def test_the_signature_is_the_fields_with_their_defaults(record: type) -> None:
    params = list(inspect.signature(record).parameters.values())
    fields = dataclasses.fields(record)
    assert [p.name for p in params] == [f.name for f in fields]
    for param, field in zip(params, fields, strict=True):
        missing = field.default is dataclasses.MISSING
        expected = inspect.Parameter.empty if missing else field.default
        assert param.default is expected or param.default == expected, field.name


@pytest.mark.parametrize("record", FAST, ids=lambda record: record.__name__)
def test_positional_keyword_and_default_construction_set_every_field(record: type) -> None:
    fields = dataclasses.fields(record)
    values = [_sample(field, i) for i, field in enumerate(fields)]
    by_position = record(*values)
    by_name = record(**{f.name: v for f, v in zip(fields, values, strict=True)})
    assert by_position == by_name
    assert [getattr(by_position, f.name) for f in fields] == values
    required = {f.name: f"v{i}" for i, f in enumerate(fields) if f.default is dataclasses.MISSING}
    defaulted = record(**required)
    for field in fields:
        expected = required.get(field.name, field.default)
        assert getattr(defaulted, field.name) == expected
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(by_position, fields[0].name, "changed")
    with pytest.raises(TypeError):
        record(*values, "one too many")
    assert hash(by_name) == hash(record(*values))


def test_replace_and_equality_behave_as_before() -> None:
    finish = Finish(lease=Lease("job_1", "tok"), state=JobState.SUCCEEDED, reason="completed")
    moved = dataclasses.replace(finish, retry_in_s=2.0)
    assert moved.retry_in_s == 2.0 and moved.lease == finish.lease and moved != finish
    assert ProviderResult(body={}, usage=Usage(1, 2)).usage.as_dict()["total_tokens"] == 3


def test_records_it_cannot_build_are_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    for record in (NoSlots, Factory, PostInit):
        with pytest.raises(TypeError):
            fast_init(record)
