"""jobgate.testing.PacedClock: a sleep goes through only when the test allowed it."""

from __future__ import annotations

import asyncio

import pytest

from jobgate.testing import PacedClock

pytestmark = pytest.mark.asyncio


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_sleeps_wait_for_their_turn() -> None:
    clock = PacedClock(allowed=1)
    sleeps = [asyncio.create_task(clock.sleep(0)) for _ in range(3)]
    await _settle()
    assert [s.done() for s in sleeps] == [True, False, False]
    clock.allow(1)
    await _settle()
    assert [s.done() for s in sleeps] == [True, True, False]
    clock.run_free()
    await asyncio.wait_for(asyncio.gather(*sleeps), 10)
    await asyncio.wait_for(clock.sleep(0), 10)  # free from then on


async def test_unpaced_by_default() -> None:
    await asyncio.wait_for(PacedClock().sleep(0), 10)
