"""The I/O steps a client operation asks for, and how an operation is advanced one step.

Every operation of the client (a request with its retries, `wait()`, following events or
output, `resume()`) is written once, in `_plans.py`, as a generator that yields these steps
and receives their outcome: a value sent back, or an `httpx.TransportError` thrown in where
the network failed. It decides everything (when to retry, how long to back off, where to
resume a stream, when a wait is done) and does no I/O itself. `Client` and `AsyncClient` are
the two drivers: each performs the steps with its own httpx client and its own sleep, so the
sync and async twins differ only in how they wait on I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic, TypeAlias, TypeVar

import httpx

from jobgate.client.models import Job

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    """Send a request; the answer is its `httpx.Response`. With `stream`, only the status and
    headers are read: the body is then read with `ReadBody` or line by line with `NextLine`,
    and the driver closes the response when the next stream opens or the operation ends."""

    request: httpx.Request
    stream: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ReadBody:
    """Read the rest of the streamed response (to parse an error answer); no value."""

    response: httpx.Response


@dataclasses.dataclass(frozen=True, slots=True)
class NextLine:
    """The open stream's next line (without its line ending), or None where it ended."""


@dataclasses.dataclass(frozen=True, slots=True)
class Sleep:
    """Wait this long before the next step (the client's `_sleep`, a seam for fake clocks)."""

    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class Clock:
    """The monotonic clock's reading, in seconds (the client's `_monotonic`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Blocking:
    """A call that blocks on local I/O (the journal's SQLite file); its result is the value.
    The async client runs it in a thread, so the event loop never waits on the disk."""

    call: Callable[[], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Notify:
    """Call the user's `on_change` with the job (the async client awaits what it returns)."""

    callback: Callable[[Job], object]
    job: Job


@dataclasses.dataclass(frozen=True, slots=True)
class Emit:
    """Hand one item (an event, an output delta) to the caller iterating the operation."""

    item: Any


Step: TypeAlias = Send | ReadBody | NextLine | Sleep | Clock | Blocking | Notify | Emit
# An operation: yields steps, is sent each step's outcome, returns its result.
Plan: TypeAlias = Generator[Step, Any, T]


@dataclasses.dataclass(slots=True)
class Outcome:
    """What the last step gave: a value, or the transport error it raised."""

    value: Any = None
    error: httpx.TransportError | None = None


class Run(Generic[T]):
    """One plan being driven. Iterating it gives the plan's steps; the driver answers each
    (`answer`, or `fail` where the network failed) before asking for the next, and reads
    `result` once the iteration ends. It also holds the open streamed response, if any, for
    the driver to close."""

    def __init__(self, plan: Plan[T]) -> None:
        self._plan = plan
        self._outcome = Outcome()
        self._result: tuple[T] | None = None
        self.streamed: httpx.Response | None = None
        self.lines: Any = None  # the streamed response's line iterator (sync or async)

    def __iter__(self) -> Iterator[Step]:
        while True:
            outcome, self._outcome = self._outcome, Outcome()
            try:
                if outcome.error is not None:
                    step = self._plan.throw(outcome.error)
                else:
                    step = self._plan.send(outcome.value)
            except StopIteration as stop:
                self._result = (stop.value,)
                return
            yield step

    def answer(self, value: object) -> None:
        self._outcome.value = value

    def fail(self, error: httpx.TransportError) -> None:
        self._outcome.error = error

    @property
    def result(self) -> T:
        """What the plan returned (after the iteration ended)."""
        if self._result is None:
            raise RuntimeError("the plan has not finished")
        return self._result[0]
