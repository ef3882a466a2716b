"""The one place that reads the wall clock; everything else takes a Clock."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for local intervals only)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def to_unix(moment: datetime | None) -> int | None:
    """Unix seconds, as the HTTP API shows times."""
    return None if moment is None else int(moment.timestamp())


def from_unix(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
