"""Bulk actions by filter: cancel, redrive or delete every job matching a filter, a chunk per
transaction (keyset order by id), each change audited as a job event.

A call does at most `max_jobs` jobs and answers a cursor: a million-row action is many short
transactions over many calls, never one long one, and an interrupted one resumes from the
cursor. A tenant acts on its own jobs only; an operator (a jgo_ key) across tenants.
"""

from __future__ import annotations

import dataclasses
import logging

from jobgate import metrics
from jobgate.domain import bulk
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.storage.feature_protocol import BulkActionsStore

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 500
MAX_JOBS_PER_CALL = 100_000


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: a tenant (its own jobs only) or an operator (tenant_id None: every tenant)."""

    actor: str  # `api:bulk` for a tenant key, `operator:<name>` for an operator key
    tenant_id: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class BulkActionOutcome:
    action: BulkAction
    changed: int
    last_id: str | None  # pass as `after` to continue
    has_more: bool


def scoped(caller: Caller, where: JobFilter) -> JobFilter:
    """The filter as the caller may apply it: a tenant's is pinned to its own jobs (a filter
    naming another tenant matches nothing, exactly like an unknown one)."""
    if caller.tenant_id is None:
        return where
    if where.tenant_id is not None and where.tenant_id != caller.tenant_id:
        return dataclasses.replace(where, tenant_id="")  # no tenant has the empty id
    return dataclasses.replace(where, tenant_id=caller.tenant_id)


class BulkActions:
    def __init__(self, *, storage: BulkActionsStore, chunk_size: int = DEFAULT_CHUNK) -> None:
        self._storage = storage
        self._chunk_size = chunk_size

    async def count(self, *, caller: Caller, action: BulkAction, where: JobFilter) -> int:
        """How many jobs the action would change now (the dry run)."""
        return await self._storage.job_bulk_count(where=scoped(caller, where), action=action)

    async def apply(
        self,
        *,
        caller: Caller,
        action: BulkAction,
        where: JobFilter,
        note: str | None = None,
        after: str | None = None,
        max_jobs: int = 10_000,
    ) -> BulkActionOutcome:
        """Apply `action` chunk by chunk to up to `max_jobs` jobs after the cursor `after`."""
        reason = bulk.audit_reason(action, note)
        where = scoped(caller, where)
        changed = 0
        cursor = after
        more = True
        while more and changed < max_jobs:
            limit = min(self._chunk_size, max_jobs - changed)
            chunk = await self._storage.job_bulk_apply(
                where=where,
                action=action,
                actor=caller.actor,
                reason=reason,
                after_id=cursor,
                limit=limit,
            )
            changed += len(chunk.job_ids)
            cursor = chunk.last_id or cursor
            more = len(chunk.job_ids) == limit
            if chunk.job_ids:
                metrics.BULK_ACTION_JOBS.labels(str(action)).inc(len(chunk.job_ids))
                if action is BulkAction.REDRIVE:
                    metrics.REDRIVES.labels("bulk").inc(len(chunk.job_ids))
        if changed:
            log.info(
                "bulk action",
                extra={
                    "actor": caller.actor,
                    "tenant_id": caller.tenant_id,
                    "reason": reason,
                    "count": changed,
                },
            )
        return BulkActionOutcome(action, changed, cursor, more)
