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
from jobgate.services.jobs import SubmitSpec

FAST = [Lease, Finish, ProviderCall, ProviderResult, Usage, NewJob, SubmitSpec]


def _sample(field: dataclasses.Field[Any], index: int) -> Any:
    return f"value-{index}" if field.default is dataclasses.MISSING else ("other", index)


@pytest.mark.parametrize("record", FAST, ids=lambda record: record.__name__)
def test_the_signature_is_the_fields_with_their_defaults(record: type) -> None:
    params = list(inspect.signature(record).parameters.values())
    fields = dataclasses.fields(record)
    assert [p.name for p in params] == [f.name for f in fields]
    for param, field in zip(params, fields, strict=True):
        if field.default_factory is not dataclasses.MISSING:  # a sentinel, shown as dataclasses'
            assert repr(param.default) == "<factory>", field.name
            continue
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
    class NotInit:
        a: int = dataclasses.field(default=0, init=False)

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    for record in (NoSlots, NotInit, PostInit):
        with pytest.raises(TypeError):
            fast_init(record)


def test_a_default_factory_makes_a_new_value_per_record_as_dataclasses_does() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Plain:
        a: int
        b: dict[str, int] = dataclasses.field(default_factory=dict)
        c: int = 3

    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Fast:
        a: int
        b: dict[str, int] = dataclasses.field(default_factory=dict)
        c: int = 3

    first, second = Fast(1), Fast(2)
    assert first.b == {} and second.b == {} and first.b is not second.b
    given = {"x": 1}
    assert Fast(1, given).b is given
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}),
        ((1, given, 4), {}),
        ((), {"a": 1, "c": 5}),
    ]
    for args, kwargs in calls:
        fast, plain = Fast(*args, **kwargs), Plain(*args, **kwargs)
        assert [fast.a, fast.b, fast.c] == [plain.a, plain.b, plain.c]
    spec = SubmitSpec(endpoint="/v1/chat/completions", body={})
    assert spec.metadata == {} and spec.metadata is not SubmitSpec("e", {}).metadata
