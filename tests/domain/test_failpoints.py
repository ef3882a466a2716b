from __future__ import annotations

import pytest

from jobgate import failpoints


def test_parse_and_fire_on_nth_hit() -> None:
    failpoints.arm("a=error@2;b=sleep:0")
    try:
        failpoints.hit("a")  # first hit: armed for the second
        with pytest.raises(failpoints.FailpointError):
            failpoints.hit("a")
        failpoints.hit("a")  # third: quiet again
        failpoints.hit("b")
        failpoints.hit("unarmed")
    finally:
        failpoints.arm("")


@pytest.mark.parametrize("spec", ["a=explode", "=kill", "a=sleep:x"])
def test_bad_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        failpoints.parse(spec)


def test_a_tagged_failpoint_fires_only_for_its_tag() -> None:
    failpoints.arm("before_provider_call[sim-poison]=error")
    try:
        failpoints.hit("before_provider_call", "sim-echo")
        failpoints.hit("before_provider_call")
        with pytest.raises(failpoints.FailpointError):
            failpoints.hit("before_provider_call", "sim-poison")
    finally:
        failpoints.arm("")
