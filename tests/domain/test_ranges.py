"""The ranges of client values (domain.ranges): the JSON walk names the first bad member, and
the timeout bound holds for callers that bypass the HTTP models."""

from __future__ import annotations

import math

import pytest

from jobgate import errors
from jobgate.domain import ranges


def test_the_json_walk_names_the_first_bad_member() -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        ranges.check_json({"a": [1, {"b": 2**63}]}, path="body")
    assert caught.value.param == "body.a.1.b" and caught.value.code == "number_out_of_range"


@pytest.mark.parametrize(
    "value",
    [2**63, -(2**63) - 1, float(2**63), -float(2**63), 1e300, math.nan, math.inf, "a\x00b",
     {"k\x00": 1}, {"k" * 1025: 1}],
)  # fmt: skip
def test_values_that_cannot_be_kept_are_refused(value: object) -> None:
    with pytest.raises(errors.InvalidRequest):
        ranges.check_json({"v": value})


def test_values_at_the_bounds_pass() -> None:
    ranges.check_json({"a": [2**63 - 1, -(2**63), 9.2e18, -0.0, 1e-300, "x" * 10_000, None]})
    deepest: object = 1
    for _ in range(ranges.MAX_JSON_DEPTH):
        deepest = [deepest]
    ranges.check_json(deepest)
    with pytest.raises(errors.InvalidRequest) as caught:
        ranges.check_json([deepest])
    assert caught.value.code == "json_too_deep"


@pytest.mark.parametrize("value", [0, -1, 3e11, 1e300, math.inf, math.nan])
def test_timeouts_outside_the_range_are_refused(value: float) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        ranges.check_timeout(value, "execution_timeout_s")
    assert caught.value.param == "execution_timeout_s"


def test_timeouts_inside_the_range_pass() -> None:
    for value in (None, ranges.MIN_TIMEOUT_S, 600, ranges.MAX_TIMEOUT_S):
        ranges.check_timeout(value, "start_timeout_s")


class _Text(str):
    pass


class _Number(int):
    pass


@pytest.mark.parametrize(
    ("value", "param"),
    [({"a": _Text("x\x00")}, "body.a"), ({"a": [_Number(2**64)]}, "body.a.0"),
     ({"a": {"b": math.nan}}, "body.a.b"), ({"a": {5: 1}}, None)],
)  # fmt: skip
def test_the_fast_walk_leaves_unusual_values_to_the_full_one(value: object, param: str) -> None:
    """check_json walks without paths first; a subclass, a NaN or a non-string member name
    falls through to the walk that names the member, never past it."""
    with pytest.raises((errors.InvalidRequest, TypeError)) as caught:
        ranges.check_json(value, path="body")
    if param is not None:
        assert isinstance(caught.value, errors.InvalidRequest) and caught.value.param == param
