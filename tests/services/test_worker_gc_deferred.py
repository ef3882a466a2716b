"""A claimed batch answered at once runs with the cyclic collector's automatic collections held
back (services.worker._collections_deferred): none interrupts the batch, none is skipped (the
collector is on again right after), and a collector someone turned off stays off."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from jobgate.services import worker


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations of the collections that run, while the test runs."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)


def test_no_automatic_collection_interrupts_the_batch(collections: list[int]) -> None:
    assert gc.isenabled()
    with worker._collections_deferred():
        assert not gc.isenabled()
        batch = [{"job": [i]} for i in range(20 * gc.get_threshold()[0])]  # many young objects
        assert collections == []
    assert gc.isenabled()
    more = [[i] for i in range(gc.get_threshold()[0] + 1)]  # the next allocations collect
    assert collections != []
    del batch, more


def test_the_collector_is_on_again_after_a_failing_batch() -> None:
    with pytest.raises(RuntimeError), worker._collections_deferred():
        raise RuntimeError("an answer raised")
    assert gc.isenabled()


def test_a_collector_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with worker._collections_deferred():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
