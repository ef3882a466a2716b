"""In-process wake-ups: who is waiting on which job, and which loops want to hear of new work.

The storage layer publishes here after its own commits; on PostgreSQL a LISTEN connection also
publishes what other processes committed. A signal is a hint to re-read, never data: waiters
always read the database after waking, so a duplicate or spurious signal is harmless and a
lost one costs at most a poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator


class ChangeHub:
    def __init__(self) -> None:
        self._job_waiters: dict[str, set[asyncio.Event]] = {}
        self._stream_waiters: dict[str, set[asyncio.Event]] = {}
        self._work: set[asyncio.Event] = set()
        self._outbox: set[asyncio.Event] = set()
        self._reconcile: set[asyncio.Event] = set()
        self._cancel_listeners: set[Callable[[list[str]], None]] = set()

    # -- publishing ----------------------------------------------------------------------

    def jobs_changed(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            for event in self._job_waiters.get(job_id, ()):
                event.set()

    def streams_changed(self, job_ids: Iterable[str]) -> None:
        """New output chunks of these jobs (live output streaming)."""
        for job_id in job_ids:
            for event in self._stream_waiters.get(job_id, ()):
                event.set()

    def work_available(self) -> None:
        for event in self._work:
            event.set()

    def outbox_available(self) -> None:
        for event in self._outbox:
            event.set()

    def reconcile_due(self) -> None:
        """A background job needs a status check now (a provider event, an early accept)."""
        for event in self._reconcile:
            event.set()

    def cancel_requested(self, job_ids: list[str]) -> None:
        for listener in list(self._cancel_listeners):
            listener(job_ids)

    def everything_changed(self) -> None:
        """After a gap in the notification stream (a reconnect): wake every waiter."""
        for waiters in (self._job_waiters, self._stream_waiters):
            for events in waiters.values():
                for event in events:
                    event.set()
        self.work_available()
        self.outbox_available()
        self.reconcile_due()

    # -- subscribing ---------------------------------------------------------------------

    @contextlib.contextmanager
    def watch_job(self, job_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever `job_id` changes; register before reading to miss nothing."""
        event = asyncio.Event()
        self._job_waiters.setdefault(job_id, set()).add(event)
        try:
            yield event
        finally:
            waiters = self._job_waiters.get(job_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._job_waiters[job_id]

    @contextlib.contextmanager
    def watch_stream(self, job_id: str) -> Iterator[StreamWatch]:
        """Wake-ups for a reader of `job_id`'s output: `changed` is set when the job moves or
        appends output, and `moved` / `appended` say which. Register before reading."""
        watch = StreamWatch()
        self._job_waiters.setdefault(job_id, set()).add(watch.moved)
        self._stream_waiters.setdefault(job_id, set()).add(watch.appended)
        try:
            yield watch
        finally:
            _discard(self._job_waiters, job_id, watch.moved)
            _discard(self._stream_waiters, job_id, watch.appended)

    @contextlib.contextmanager
    def watch_work(self) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._work.add(event)
        try:
            yield event
        finally:
            self._work.discard(event)

    @contextlib.contextmanager
    def watch_outbox(self) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._outbox.add(event)
        try:
            yield event
        finally:
            self._outbox.discard(event)

    @contextlib.contextmanager
    def watch_reconcile(self) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        self._reconcile.add(event)
        try:
            yield event
        finally:
            self._reconcile.discard(event)

    @contextlib.contextmanager
    def on_cancel(self, listener: Callable[[list[str]], None]) -> Iterator[None]:
        self._cancel_listeners.add(listener)
        try:
            yield
        finally:
            self._cancel_listeners.discard(listener)

    @property
    def job_watch_count(self) -> int:
        return sum(len(waiters) for waiters in self._job_waiters.values())

    @property
    def stream_watch_count(self) -> int:
        return sum(len(waiters) for waiters in self._stream_waiters.values())


class _Linked(asyncio.Event):
    """An event that also sets `parent` (one wait for several kinds of change)."""

    def __init__(self, parent: asyncio.Event) -> None:
        super().__init__()
        self._parent = parent

    def set(self) -> None:
        super().set()
        self._parent.set()


class StreamWatch:
    """What a stream reader waits on: `changed`, then `take()` says what happened."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()
        self.moved: asyncio.Event = _Linked(self.changed)  # the job's row changed
        self.appended: asyncio.Event = _Linked(self.changed)  # output was appended

    def take(self) -> tuple[bool, bool]:
        """(moved, appended) since the last take; clears both."""
        moved, appended = self.moved.is_set(), self.appended.is_set()
        self.moved.clear()
        self.appended.clear()
        return moved, appended


def _discard(waiters: dict[str, set[asyncio.Event]], job_id: str, event: asyncio.Event) -> None:
    events = waiters.get(job_id)
    if events is not None:
        events.discard(event)
        if not events:
            del waiters[job_id]


async def wait_for(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until `event` is set or `timeout_s` passes; clear it; True if it was set."""
    if not event.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await event.wait()
    fired = event.is_set()
    event.clear()
    return fired


class Wakeup:
    """What a background loop (worker, reconciler, dispatcher, batches) sleeps on between
    passes: one event that anything may `set()` (request_stop, a cancel, a finished task) and
    that `relaying()` also sets whenever a hub signal fires, so the loop waits on one thing."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def sleep(self, timeout_s: float) -> bool:
        """Until set or `timeout_s` passes; cleared after; True if it was set."""
        return await wait_for(self._event, timeout_s)

    @contextlib.asynccontextmanager
    async def relaying(self, *signals: asyncio.Event) -> AsyncIterator[None]:
        """While inside, every firing of one of `signals` (from ChangeHub.watch_*) is taken
        (the signal cleared) and wakes this loop."""
        relays = [
            asyncio.create_task(self._relay(signal), name="wake-up relay") for signal in signals
        ]
        try:
            yield
        finally:
            for relay in relays:
                relay.cancel()
            for relay in relays:
                with contextlib.suppress(asyncio.CancelledError):
                    await relay

    async def _relay(self, signal: asyncio.Event) -> None:
        while True:
            await signal.wait()
            signal.clear()
            self._event.set()
