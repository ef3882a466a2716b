"""ConsoleStore, written once over the executor: what the operator console reads."""

from __future__ import annotations

from datetime import datetime

from jobgate import errors
from jobgate.domain import ranges
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job
from jobgate.domain.rollups import QueueDepth, Transition
from jobgate.storage import base
from jobgate.storage.executor import SqlPart


class ConsoleQueries(SqlPart):
    async def console_transitions(self, *, since: datetime, limit: int) -> list[Transition]:
        since_at = self._sql.codec.time(since)
        rows = await self._sql.read("console_transitions", since=since_at, limit=limit)
        return [self._decode.record(Transition, row) for row in rows]

    async def console_queue_depth(self) -> list[QueueDepth]:
        rows = await self._sql.read("console_queue_depth", counted=ranges.QUEUE_COUNTED)
        return [self._decode.record(QueueDepth, row) for row in rows]

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
            row = await self._sql.read_one("job_get", id=job_id)
            return [] if row is None else [self._decode.job(row)]
        if provider_job_id is not None:
            rows = await self._sql.read(
                "console_job_by_provider_job_id", provider_job_id=provider_job_id, limit=limit
            )
            return [self._decode.job(row) for row in rows]
        after_created_at = None
        if after is not None:
            anchor = await self._sql.read_one("job_get", id=after)
            if anchor is None:
                raise errors.InvalidRequest(f"no job with id {after!r}", param="after")
            after_created_at = anchor["created_at"]  # as stored: the cursor compares exactly
        codec = self._sql.codec
        params = base.bulk_filter_params(where, BulkAction.CANCEL, time=codec.time, json=codec.json)
        rows = await self._sql.read(
            "console_job_search",
            **params,
            after_created_at=after_created_at,
            after_id=after,
            limit=limit,
        )
        return [self._decode.job(row) for row in rows]
