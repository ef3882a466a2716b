"""ConsoleStore on PostgreSQL: what the operator console reads."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from jobgate import errors
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job
from jobgate.domain.rollups import QueueDepth, Transition
from jobgate.domain.states import JobState
from jobgate.storage import base
from jobgate.storage.rows import RowDecoder


def _same(value: Any) -> Any:
    return value


class PostgresConsole:
    """Mixed into PostgresStorage, which supplies the query helpers and `_decode`."""

    _decode: RowDecoder

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def job_get(self, *, job_id: str, tenant_id: str | None = None) -> Job | None:
        raise NotImplementedError

    async def console_transitions(self, *, since: datetime, limit: int) -> list[Transition]:
        return [
            Transition(
                job_id=row["job_id"],
                tenant_id=row["tenant_id"],
                provider=row["provider"],
                from_state=None if row["from_state"] is None else JobState(row["from_state"]),
                to_state=JobState(row["to_state"]),
                reason=row["reason"],
                at=row["at"],
                queued_at=row["queued_at"],
                run_at=row["run_at"],
            )
            for row in await self._fetch("console_transitions", since=since, limit=limit)
        ]

    async def console_queue_depth(self) -> list[QueueDepth]:
        rows = await self._fetch("console_queue_depth")
        return [QueueDepth(row["tenant_id"], row["provider"], row["queued"]) for row in rows]

    async def console_job_search(
        self,
        *,
        where: JobFilter,
        job_id: str | None = None,
        provider_job_id: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        if job_id is not None:
            job = await self.job_get(job_id=job_id)
            return [] if job is None else [job]
        if provider_job_id is not None:
            rows = await self._fetch(
                "console_job_by_provider_job_id", provider_job_id=provider_job_id, limit=limit
            )
            return [self._decode.job(row) for row in rows]
        if after is not None and await self.job_get(job_id=after) is None:
            raise errors.InvalidRequest(f"no job with id {after!r}", param="after")
        params = base.bulk_filter_params(where, BulkAction.CANCEL, time=_same, json=_same)
        rows = await self._fetch("console_job_search", **params, after_id=after, limit=limit)
        return [self._decode.job(row) for row in rows]
