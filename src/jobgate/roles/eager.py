"""Coroutines started at once, in the task that asks: the part that needs no waiting runs
there and then, and only one that waits is awaited on.

A coroutine's first step (`coroutine.send(None)`) either finishes it (StopIteration holds its
value: nothing was scheduled) or leaves it suspended on what it yielded, an asyncio future (or
None, a bare yield). `Resumed` then lets a task await the rest exactly as if it had awaited the
coroutine from the start: what the coroutine yields goes to the task, what the task sends or
throws in (a result, a cancellation) goes to the coroutine. The task that drove the first step
must be the one that awaits the rest: a coroutine binds what it enters (a timeout, a cancel
scope, `asyncio.current_task()`) to the task it runs in.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Resumed(Generic[T]):
    """Await the rest of `coroutine`, suspended on `yielded` by its first step."""

    __slots__ = ("_coroutine", "_yielded")

    def __init__(self, coroutine: Coroutine[Any, Any, T], yielded: Any) -> None:
        self._coroutine = coroutine
        self._yielded = yielded

    def __await__(self) -> Generator[Any, Any, T]:
        coroutine = self._coroutine
        yielded = self._yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # thrown in by the task (a cancellation): passed on
                try:
                    yielded = coroutine.throw(exc)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            else:
                try:
                    yielded = coroutine.send(sent)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
