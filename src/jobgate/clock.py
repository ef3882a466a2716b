"""The one place that reads the wall clock; everything else takes a Clock."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for local intervals only)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


# TEST ONLY: shifts this process's wall clock by N seconds (e.g. -600 or 600), so that fault
# tests can run a worker or reaper whose host clock is skewed. Never set it in production.
# Leases must not care: their math runs on the database's clock.
CLOCK_OFFSET_ENV = "JOBGATE_TEST_CLOCK_OFFSET_S"


def _offset_from_env() -> timedelta:
    raw = os.environ.get(CLOCK_OFFSET_ENV, "")
    return timedelta(seconds=float(raw)) if raw.strip() else timedelta(0)


class SystemClock:
    def __init__(self) -> None:
        self._offset = _offset_from_env()

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def to_unix(moment: datetime | None) -> int | None:
    """Unix seconds, as the HTTP API shows times."""
    return None if moment is None else int(moment.timestamp())


def from_unix(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
