"""frozen.record: a slotted dataclass equal and hashed by value, which the type checker holds
read-only (the only guard of its fields at run time is mypy, so the guard itself is tested)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest
from mypy import api as mypy_api

from jobgate.domain import frozen


@frozen.record
class Point:
    x: int
    y: int = 0
    tags: dict[str, int] = dataclasses.field(default_factory=dict)


def test_a_record_is_a_slotted_value() -> None:
    point = Point(1, 2)
    assert point == Point(1, 2) and point != Point(1, 3)
    assert not hasattr(point, "__dict__")
    assert Point(1).tags == {} and Point(1).tags is not Point(1).tags  # a factory per record
    assert dataclasses.replace(point, y=5) == Point(1, 5)
    assert repr(point) == "Point(x=1, y=2, tags={})"


def test_a_record_hashes_by_value_as_a_frozen_dataclass_does() -> None:
    @frozen.record
    class Pair:
        a: int
        b: str

    @dataclasses.dataclass(frozen=True)
    class FrozenPair:
        a: int
        b: str

    assert hash(Pair(1, "x")) == hash(Pair(1, "x")) == hash(FrozenPair(1, "x"))
    assert len({Pair(1, "x"), Pair(1, "x"), Pair(2, "x")}) == 2
    with pytest.raises(TypeError, match="unhashable"):
        hash(Point(1))  # a dict field, as a frozen dataclass would refuse


def test_the_type_checker_refuses_assigning_a_field(tmp_path: Path) -> None:
    source = tmp_path / "uses_record.py"
    source.write_text(
        textwrap.dedent(
            """
            from jobgate.domain import frozen

            @frozen.record
            class Lease:
                job_id: str
                token: str

            lease = Lease("job_1", "tok")
            lease.token = "other"
            Lease("job_1")
            """
        )
    )
    stdout, _, status = mypy_api.run(
        ["--strict", "--no-incremental", "--follow-imports=silent", str(source)]
    )
    assert status == 1, stdout
    assert 'Property "token" defined in "Lease" is read-only' in stdout
    assert 'Missing positional argument "token"' in stdout
