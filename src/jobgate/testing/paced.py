"""A real clock whose sleeps a test lets through: give it to the simulated provider and the
test decides when each simulated call moves on (one sleep per streamed delta, one for a whole
answer), so "the job was still running when..." is a fact of the test, not of machine speed."""

from __future__ import annotations

import asyncio

from jobgate.clock import SystemClock


class PacedClock(SystemClock):
    """The system clock, but `sleep` first waits for its turn: `allowed` sleeps go through
    (None: every one), the next waits until `allow` or `run_free`. Only sleeps are paced;
    `now` and `monotonic` are the system's."""

    def __init__(self, allowed: int | None = None) -> None:
        super().__init__()
        self._allowed = allowed
        self._changed = asyncio.Event()

    def allow(self, sleeps: int) -> None:
        """Let `sleeps` more sleeps through (of any caller), then hold again."""
        self._allowed = (self._allowed or 0) + sleeps
        self._changed.set()

    def run_free(self) -> None:
        """Let every sleep through from now on, the waiting ones first."""
        self._allowed = None
        self._changed.set()

    async def sleep(self, seconds: float) -> None:
        while self._allowed is not None and self._allowed <= 0:
            self._changed.clear()
            await self._changed.wait()
        if self._allowed is not None:
            self._allowed -= 1
        await super().sleep(seconds)
