"""Cluster-wide facts the alert gauges read at scrape time (a part of the Storage contract)."""

from __future__ import annotations

from typing import Protocol


class SignalStore(Protocol):
    async def webhook_endpoints_failing(self, *, min_attempts: int) -> dict[str, int]:
        """Per tenant id: enabled endpoints with a delivery still pending after at least
        `min_attempts` failed attempts. Reads only pending outbox rows."""
        ...
