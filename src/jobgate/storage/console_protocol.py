"""What the operator console reads: recent transitions for its charts, queue depth by tenant
and provider, and job search. A part of the Storage contract."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from jobgate.domain.bulk import JobFilter
from jobgate.domain.job import Job
from jobgate.domain.rollups import QueueDepth, Transition


class ConsoleStore(Protocol):
    async def console_transitions(self, *, since: datetime, limit: int) -> list[Transition]:
        """Applied job events at or after `since`, newest first, at most `limit` (one query
        over the job_events time index: the charts' only read of history)."""
        ...

    async def console_queue_depth(self) -> list[QueueDepth]:
        """Queued jobs now, by tenant and provider."""
        ...

    async def console_job_search(
        self,
        *,
        where: JobFilter,
        job_id: str | None = None,
        provider_job_id: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """Jobs matching every criterion given, newest first; `after` (a job id) pages like
        admin_job_list. `job_id` and `provider_job_id` match exactly, through an index.
        Raises InvalidRequest for an unknown `after`."""
        ...
