"""Bulk actions by filter, a chunk per transaction (a part of the Storage contract)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Protocol

from jobgate.domain.bulk import BulkAction, JobFilter


@dataclasses.dataclass(frozen=True, slots=True)
class BulkChunk:
    job_ids: list[str]  # the jobs this chunk changed, in id order
    last_id: str | None  # the cursor for the next chunk (None when nothing was changed)


class BulkStore(Protocol):
    async def job_bulk_count(
        self, *, where: JobFilter, action: BulkAction, now: datetime | None = None
    ) -> int:
        """How many jobs match `where` and are eligible for `action` now (a read)."""
        ...

    async def job_bulk_apply(
        self,
        *,
        where: JobFilter,
        action: BulkAction,
        actor: str,
        reason: str,
        after_id: str | None,
        limit: int,
        now: datetime | None = None,
    ) -> BulkChunk:
        """One short transaction: apply `action` to the first `limit` eligible jobs matching
        `where` with an id above `after_id` (keyset order by id), each change logged as a
        job event with `actor` and `reason`. Fewer than `limit` changed means none are left.
        Rows another transaction is changing are waited for (never skipped), then checked
        again. Never moves a job the action does not apply to (domain.bulk.BulkAction)."""
        ...
