"""Storage for role heartbeats: which roles have a live process (a part of the Storage contract)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class RolesStore(Protocol):
    async def role_heartbeat(
        self, *, role: str, instance: str, now: datetime | None = None
    ) -> None:
        """Record that `instance` (one process) of `role` is alive at the database's `now`,
        and forget instances of that role unseen for a day. Idempotent."""
        ...

    async def role_heartbeat_age_s(self, *, role: str, now: datetime | None = None) -> float | None:
        """Seconds since any instance of `role` was last seen, by the database's clock; None
        if none ever was. Read-only."""
        ...
