"""A clock that moves only when told to."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta


class FakeClock:
    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=UTC)
        self._monotonic = 1000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        self._monotonic += seconds
        return self._now

    def set(self, moment: datetime) -> None:
        self._monotonic += (moment - self._now).total_seconds()
        self._now = moment

    async def sleep(self, seconds: float) -> None:
        """Advance instead of waiting, then let other tasks run."""
        self.advance(seconds)
        await asyncio.sleep(0)
