"""Is a reconciler running? Each reconciler process beats a row in `role_heartbeats`; the API,
the worker and readiness read its age, so that background-mode jobs with nobody to settle them
say so instead of staying `running` in silence."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from jobgate import clock, errors, ids
from jobgate.config import Settings
from jobgate.storage.protocol import RolesStore

log = logging.getLogger("jobgate.presence")
RECONCILER = "reconciler"


def background_providers(settings: Settings) -> list[str]:
    """Providers whose jobs only a reconciler can settle."""
    return sorted(
        name for name, provider in settings.all_providers().items() if provider.mode == "background"
    )


def beat_interval_s(settings: Settings) -> float:
    return max(1.0, min(settings.reconciler_interval_s, 10.0))


def stale_after_s(settings: Settings) -> float:
    """A reconciler unseen this long is taken as gone (several missed beats, not one)."""
    return max(30.0, 6 * beat_interval_s(settings))


class Heartbeat:
    """Beats `role`'s row while its process runs; `beat_once()` is the loop's body."""

    def __init__(
        self,
        storage: RolesStore,
        settings: Settings,
        *,
        role: str = RECONCILER,
        clock_: clock.Clock | None = None,
    ) -> None:
        self.storage = storage
        self.role = role
        self.clock = clock_ or clock.SystemClock()
        self.instance = ids.RandomIds(self.clock).new("proc")  # one per process start
        self.interval_s = beat_interval_s(settings)
        self._stop = asyncio.Event()

    async def beat_once(self) -> None:
        await self.storage.role_heartbeat(role=self.role, instance=self.instance)

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.beat_once()
            except errors.StorageError as exc:  # the role itself reports storage trouble
                log.debug("no heartbeat: %s", type(exc).__name__, extra={"role": self.role})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)


async def reconciler_missing(storage: RolesStore, settings: Settings) -> str | None:
    """A one-line reason when a background-mode provider is configured and no reconciler has
    beaten recently; None when none is configured or one is alive."""
    providers = background_providers(settings)
    if not providers:
        return None
    age = await storage.role_heartbeat_age_s(role=RECONCILER)
    if age is not None and age <= stale_after_s(settings):
        return None
    seen = "no reconciler has ever run" if age is None else f"no reconciler seen for {age:.0f} s"
    return (
        f"{seen}, and provider {', '.join(providers)} runs in background mode: its jobs stay "
        "running until `jobgate reconciler` (or `jobgate serve`) settles them"
    )
