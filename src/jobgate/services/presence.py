"""Which roles have a live process. Every role process beats a row per role it runs in
`role_heartbeats` (and deletes it when it stops); the API, readiness and the worker read their
ages, so that work no live process would take says so (`no_worker`) instead of waiting in
silence: queued jobs without a worker, batches without the batches role, deliveries without a
dispatcher, background-mode jobs without a reconciler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from jobgate import clock, errors, ids
from jobgate.config import Settings
from jobgate.storage.protocol import RolesStore

log = logging.getLogger("jobgate.presence")
WORKER = "worker"
BATCHES = "batches"
DISPATCHER = "dispatcher"
REAPER = "reaper"
RECONCILER = "reconciler"
READ_EVERY_S = 1.0  # how stale the ages a process reads may be

# What waits while a role is missing, and the command that runs it.
_WAITS_FOR: dict[str, tuple[str, str]] = {
    WORKER: ("queued jobs wait", "`jobgate worker` (or `jobgate serve`)"),
    BATCHES: (
        "batches wait",
        "a process with the batches role (`jobgate worker` runs it, or `jobgate serve`)",
    ),
    DISPATCHER: ("webhook deliveries wait", "`jobgate dispatcher` (or `jobgate serve`)"),
    REAPER: (
        "expired leases are not reclaimed and schedules do not fire",
        "`jobgate reaper` (or `jobgate serve`)",
    ),
}


def background_providers(settings: Settings) -> list[str]:
    """Providers whose jobs only a reconciler can settle."""
    return sorted(
        name for name, provider in settings.all_providers().items() if provider.mode == "background"
    )


def beat_interval_s(settings: Settings) -> float:
    return max(1.0, min(settings.reconciler_interval_s, 10.0))


def stale_after_s(settings: Settings) -> float:
    """A role unseen this long is taken as gone (several missed beats, not one)."""
    return max(30.0, 6 * beat_interval_s(settings))


class Heartbeat:
    """Beats a row for each of `roles` while its process runs, and deletes them when it
    stops (the role then reads as missing at once); `beat_once()` is the loop's body."""

    def __init__(
        self,
        storage: RolesStore,
        settings: Settings,
        *,
        roles: Iterable[str] = (RECONCILER,),
        clock_: clock.Clock | None = None,
    ) -> None:
        self.storage = storage
        self.roles = tuple(roles)
        self.clock = clock_ or clock.SystemClock()
        self.instance = ids.RandomIds(self.clock).new("proc")  # one per process start
        self.interval_s = beat_interval_s(settings)
        self._stop = asyncio.Event()

    async def beat_once(self) -> None:
        for role in self.roles:
            await self.storage.role_heartbeat(role=role, instance=self.instance)

    async def forget(self) -> None:
        for role in self.roles:
            await self.storage.role_heartbeat_forget(role=role, instance=self.instance)

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.beat_once()
            except errors.StorageError as exc:  # the roles themselves report storage trouble
                log.debug("no heartbeat: %s", type(exc).__name__, extra={"roles": self.roles})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
        try:
            await self.forget()
        except errors.StorageError:  # the rows go stale instead
            log.debug("heartbeats not forgotten", extra={"roles": self.roles})


class Presence:
    """Which roles are alive, as one process sees them: the roles it runs itself (`local`,
    filled by process.roles), and the others by their heartbeats, read at most once every
    READ_EVERY_S."""

    def __init__(
        self, storage: RolesStore, settings: Settings, *, clock_: clock.Clock | None = None
    ) -> None:
        self._storage = storage
        self._settings = settings
        self._clock = clock_ or clock.SystemClock()
        self.local: set[str] = set()
        self._ages: dict[str, float] = {}
        self._read_at: float | None = None
        self._reading = asyncio.Lock()

    async def _age(self, role: str) -> float | None:
        if self._stale():
            async with self._reading:  # callers finding it stale together share one read
                if self._stale():
                    at = self._clock.monotonic()
                    self._ages = await self._storage.role_heartbeat_ages()
                    self._read_at = at
        age = self._ages.get(role)
        return None if age is None else age + self._clock.monotonic() - (self._read_at or 0.0)

    def _stale(self) -> bool:
        return self._read_at is None or self._clock.monotonic() - self._read_at >= READ_EVERY_S

    async def missing(self, role: str) -> str | None:
        """A sentence saying that no live process runs `role` and what waits for it; None
        when one does."""
        if role in self.local:
            return None
        age = await self._age(role)
        if age is not None and age <= stale_after_s(self._settings):
            return None
        seen = f"no {role} has ever run" if age is None else f"no {role} seen for {age:.0f} s"
        if role == RECONCILER:
            return _reconciler_sentence(seen, background_providers(self._settings))
        what, command = _WAITS_FOR[role]
        return f"{seen}: {what} until {command} runs"

    async def reconciler_missing(self) -> str | None:
        """`missing(RECONCILER)` while a background-mode provider is configured (None when
        none is: nothing needs one)."""
        if not background_providers(self._settings):
            return None
        return await self.missing(RECONCILER)

    async def missing_with_work(self) -> list[tuple[str, str]]:
        """(role, sentence) for each role no live process runs while it has work (the
        reconciler: while a background-mode provider is configured)."""
        absent = [role for role in _WAITS_FOR if await self.missing(role) is not None]
        found: list[tuple[str, str]] = []
        if absent:
            busy = await self._storage.roles_with_work()
            for role in absent:
                sentence = await self.missing(role)
                if role in busy and sentence is not None:
                    found.append((role, sentence))
        reconciler = await self.reconciler_missing()
        if reconciler is not None:
            found.append((RECONCILER, reconciler))
        return found


def _reconciler_sentence(seen: str, providers: list[str]) -> str:
    return (
        f"{seen}, and provider {', '.join(providers)} runs in background mode: its jobs stay "
        "running until `jobgate reconciler` (or `jobgate serve`) settles them"
    )


async def reconciler_missing(storage: RolesStore, settings: Settings) -> str | None:
    """A one-line reason when a background-mode provider is configured and no reconciler has
    beaten recently; None when none is configured or one is alive (read now, uncached: for a
    process's start-up checks)."""
    return await Presence(storage, settings).reconciler_missing()
