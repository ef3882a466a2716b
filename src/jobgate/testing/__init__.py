"""Fakes for tests of jobgate and of code built on it: a clock, a real clock whose sleeps a
test lets through, ids, a scripted provider, a deadline to wait under, and throwaway
databases."""

from jobgate.testing.clock import FakeClock
from jobgate.testing.ids import SequentialIds
from jobgate.testing.paced import PacedClock
from jobgate.testing.providers import Block, Fail, ScriptedProvider, Succeed
from jobgate.testing.waiting import eventually

__all__ = [
    "Block",
    "Fail",
    "FakeClock",
    "PacedClock",
    "ScriptedProvider",
    "SequentialIds",
    "Succeed",
    "eventually",
]
