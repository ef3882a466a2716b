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
from collections.abc import Callable, Generator
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


@dataclasses.dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The operation is over; `value` is what it returned."""

    value: T


@dataclasses.dataclass(slots=True)
class Outcome:
    """What the last step gave: a value, or the transport error it raised."""

    value: Any = None
    error: httpx.TransportError | None = None

    def resume(self, plan: Plan[T]) -> Step | Done[T]:
        """Hand this outcome to `plan` and answer its next step, or Done with its result."""
        try:
            if self.error is not None:
                return plan.throw(self.error)
            return plan.send(self.value)
        except StopIteration as stop:
            return Done(stop.value)
