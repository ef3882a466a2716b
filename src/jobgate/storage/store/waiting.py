"""WaitStore on both dialects: what the claim would read about queued jobs, read the same way
(the claims' `pause_covers` fragment, their count of held slots), for `waiting` on job views
and the console's counts by reason."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate.domain import ranges
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import WaitGroup, WaitRead


class WaitQueries(SqlPart):
    async def job_wait_facts(
        self,
        *,
        tenant_id: str,
        job_ids: Sequence[str],
        count_running: bool,
        count_keys: bool,
        count_positions: bool = False,
        now: datetime | None = None,
    ) -> dict[str, WaitRead]:
        if not job_ids:
            return {}
        codec = self._sql.codec
        rows = await self._sql.read(
            "job_wait_facts",
            ids=codec.json(list(job_ids)),
            tenant_id=tenant_id,
            count_running=codec.flag(count_running),
            count_keys=codec.flag(count_keys),
            count_positions=codec.flag(count_positions),
            counted=ranges.QUEUE_POSITION_COUNTED,
            now=codec.now(now),
        )
        reads = [self._decode.record(WaitRead, row) for row in rows]
        return {read.job_id: read for read in reads}

    async def queued_wait_groups(
        self,
        *,
        keys: bool,
        capped_tenants: Sequence[str],
        limit: int,
        now: datetime | None = None,
    ) -> list[WaitGroup]:
        codec = self._sql.codec
        rows = await self._sql.read(
            "queued_wait_groups",
            keys=codec.flag(keys),
            capped_tenants=codec.json(list(capped_tenants)),
            limit=limit,
            counted=ranges.QUEUE_COUNTED,
            now=codec.now(now),
        )
        return [self._decode.record(WaitGroup, row) for row in rows]
