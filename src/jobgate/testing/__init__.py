"""Fakes for tests of jobgate and of code built on it: a clock, ids, a scripted provider,
and throwaway databases."""

from jobgate.testing.clock import FakeClock
from jobgate.testing.ids import SequentialIds
from jobgate.testing.providers import Block, Fail, ScriptedProvider, Succeed

__all__ = ["Block", "Fail", "FakeClock", "ScriptedProvider", "SequentialIds", "Succeed"]
