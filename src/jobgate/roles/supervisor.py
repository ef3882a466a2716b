"""Keeps one background role (worker, reaper, dispatcher, reconciler) running inside its process:
a role that crashes is built afresh and restarted with exponential backoff, each restart logged
with its traceback and counted in `jobgate_role_restarts_total{role}`. Only a fatal error (a
bad setting, a database schema this build cannot use) ends the role, and with it the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from jobgate import errors, failpoints, metrics
from jobgate.clock import Clock
from jobgate.services.poison_log import traceback_text

log = logging.getLogger(__name__)

# Errors no restart can mend: the process exits (non-zero) so that an operator sees them.
FATAL: tuple[type[BaseException], ...] = (errors.ConfigError,)


class Role(Protocol):
    async def run(self) -> None: ...

    def request_stop(self) -> None: ...


class RoleSupervisor:
    """Run `build()`'s role until `request_stop()`, restarting it after a crash.

    Backoff starts at `backoff_base_s` and doubles to `backoff_max_s`; a role that ran for
    `healthy_after_s` before it crashed starts again from the base."""

    def __init__(
        self,
        name: str,
        build: Callable[[], Role],
        *,
        clock: Clock,
        close: Callable[[Role], Coroutine[Any, Any, None]] | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        healthy_after_s: float = 60.0,
    ) -> None:
        self.name = name
        self._build = build
        self._close = close
        self._clock = clock
        self._backoff_base_s = backoff_base_s
        self._backoff_max_s = backoff_max_s
        self._healthy_after_s = healthy_after_s
        self._stopping = asyncio.Event()
        self._current: Role | None = None
        self.restarts = 0

    def request_stop(self) -> None:
        self._stopping.set()
        if self._current is not None:
            self._current.request_stop()

    async def run(self) -> None:
        delay_s = self._backoff_base_s
        while not self._stopping.is_set():
            role = self._current = self._build()
            started = self._clock.monotonic()
            try:
                failpoints.hit("role_run", self.name)  # tests: `role_run[reaper]=error@1`
                await role.run()
                if self._stopping.is_set():
                    return
                raise RuntimeError(f"role {self.name} returned without being asked to stop")
            except FATAL:
                raise
            except Exception as exc:
                if self._stopping.is_set():
                    log.warning(
                        "role %s failed while stopping", self.name, extra={"role": self.name}
                    )
                    return
                if self._clock.monotonic() - started >= self._healthy_after_s:
                    delay_s = self._backoff_base_s
                self.restarts += 1
                metrics.ROLE_RESTARTS.labels(self.name).inc()
                log.error(
                    "role %s crashed; restarting in %.1f s",
                    self.name,
                    delay_s,
                    extra={
                        "role": self.name,
                        "count": self.restarts,
                        "detail": type(exc).__name__,
                        "traceback": traceback_text(exc),
                    },
                )
            finally:
                if self._close is not None:
                    with contextlib.suppress(Exception):
                        await self._close(role)
            await self._pause(delay_s)
            delay_s = min(delay_s * 2, self._backoff_max_s)

    async def _pause(self, delay_s: float) -> None:
        """Sleep (on the clock, so tests need not wait) unless asked to stop first."""
        stopped = asyncio.ensure_future(self._stopping.wait())
        slept = asyncio.ensure_future(self._clock.sleep(delay_s))
        try:
            await asyncio.wait({stopped, slept}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stopped, slept):
                task.cancel()
            await asyncio.gather(stopped, slept, return_exceptions=True)
