"""BulkActionsStore, written once over the executor: count a filter's jobs, and apply an action to
them a chunk at a time. Picking and changing one chunk is one transaction of several
statements: the dialect's Transactions.bulk_chunk."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.states import JobState
from jobgate.storage import base
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import BulkChunk
from jobgate.storage.transaction_requests import BulkChunkRequest, ChangedBy

# The picked chunk's (job id, new state), sorted by id.


class BulkActionQueries(SqlPart):
    def _job_filter(self, where: JobFilter, action: BulkAction) -> dict[str, Any]:
        """The `job_filter` fragment's parameters (and the action's `:action`)."""
        codec = self._sql.codec
        return base.bulk_filter_params(where, action, time=codec.time, json=codec.json)

    async def job_bulk_count(
        self, *, where: JobFilter, action: BulkAction, now: datetime | None = None
    ) -> int:
        row = await self._sql.read_one("job_bulk_count", **self._job_filter(where, action))
        return 0 if row is None else int(row["jobs"])

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
        pick = {**self._job_filter(where, action), "after_id": after_id, "limit": limit}
        change = ChangedBy(actor, reason, self._sql.codec.now(now))
        changed = await self._tx.bulk_chunk(BulkChunkRequest(action, pick, change))
        self._bulk_published(action, changed)
        return BulkChunk([job_id for job_id, _ in changed], changed[-1][0] if changed else None)

    def _bulk_published(self, action: BulkAction, changed: Sequence[tuple[str, str]]) -> None:
        """Wake this process's waiters after a committed bulk chunk of (job id, new state)."""
        if not changed:
            return
        self.changes.jobs_changed(job_id for job_id, _ in changed)
        if action is BulkAction.REDRIVE:
            self.changes.work_available()
            return
        running = [job_id for job_id, state in changed if state == JobState.RUNNING]
        if running:
            self.changes.cancel_requested(running)
        self.changes.outbox_available()


BULK_UPDATE = {
    BulkAction.CANCEL: "job_bulk_cancel",
    BulkAction.REDRIVE: "job_bulk_redrive",
    BulkAction.DELETE: "job_bulk_delete",
}
