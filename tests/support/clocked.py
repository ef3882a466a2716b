"""A storage wrapper for tests on a FakeClock: every storage method that takes `now` and is
called without one gets the fake clock's time, so code that leaves the time to the database
(the worker, the reaper: correct in production) follows the fake clock on PostgreSQL too."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from jobgate.clock import Clock


class ClockedStorage:
    def __init__(self, storage: Any, clock: Clock) -> None:
        self._storage = storage
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._storage, name)
        if not inspect.iscoroutinefunction(target):
            return target
        if "now" not in inspect.signature(target).parameters:
            return target
        return _with_now(target, self._clock)


def _with_now(method: Callable[..., Any], clock: Clock) -> Callable[..., Any]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("now") is None:
            kwargs["now"] = clock.now()
        return await method(*args, **kwargs)

    return call
