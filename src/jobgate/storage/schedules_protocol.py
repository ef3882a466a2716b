"""Storage for recurring schedules (a part of the Storage contract). Firing is at-least-once
by design; the job a slot fires is deduplicated by its Idempotency-Key, and advancing a slot is
a compare-and-set, so two schedulers (or a restart) never double or skip a run."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from jobgate.storage.records import Schedule


class ScheduleStore(Protocol):
    async def schedule_insert(self, *, schedule: Schedule) -> Schedule:
        """Store a new schedule."""
        ...

    async def schedule_list(self, *, tenant_id: str, limit: int = 100) -> list[Schedule]:
        """A tenant's schedules, oldest first."""
        ...

    async def schedule_get(self, *, schedule_id: str, tenant_id: str) -> Schedule | None:
        """One schedule of a tenant (None: not found or another tenant's)."""
        ...

    async def schedule_set_paused(
        self,
        *,
        schedule_id: str,
        tenant_id: str,
        paused: bool,
        next_run_at: datetime | None = None,
    ) -> Schedule | None:
        """Pause or resume (a resume moves `next_run_at`: slots missed while paused are not
        fired). None: not found."""
        ...

    async def schedule_delete(self, *, schedule_id: str, tenant_id: str) -> bool:
        """Delete a schedule (its jobs stay). False: not found."""
        ...

    async def schedule_due(self, *, limit: int, now: datetime | None = None) -> list[Schedule]:
        """Unpaused schedules whose next slot has come (by the database's clock), oldest slot
        first."""
        ...

    async def schedule_advance(
        self, *, schedule_id: str, slot: datetime, next_run_at: datetime
    ) -> bool:
        """Move a schedule from `slot` (fired) to `next_run_at`, only if it is still at
        `slot` and not paused (compare-and-set). False: another scheduler moved it."""
        ...
