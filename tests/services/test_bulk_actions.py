"""The bulk service: a call is many short transactions of at most chunk_size jobs,
stops at max_jobs with a cursor, and is scoped to the caller's tenant."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.process.runtime import Runtime
from jobgate.services.bulk_actions import BulkActions, Caller
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.records import BulkChunk

pytestmark = pytest.mark.asyncio


class CountingStorage:
    """The real storage, with every bulk transaction's size recorded."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self.chunks: list[int] = []

    async def job_bulk_count(self, **kwargs: Any) -> int:
        count: int = await self._storage.job_bulk_count(**kwargs)
        return count

    async def job_bulk_apply(self, **kwargs: Any) -> BulkChunk:
        chunk: BulkChunk = await self._storage.job_bulk_apply(**kwargs)
        self.chunks.append(len(chunk.job_ids))
        assert len(chunk.job_ids) <= kwargs["limit"]
        return chunk


async def submit(runtime: Runtime, tenant_id: str, n: int) -> list[str]:
    spec = SubmitSpec(
        endpoint="/v1/chat/completions",
        body={"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
    )
    return [(await runtime.jobs.submit(tenant_id=tenant_id, spec=spec)).job.id for _ in range(n)]


def bulk_jobs(action: str) -> float:
    sample = REGISTRY.get_sample_value("jobgate_bulk_action_jobs_total", {"action": action})
    return sample or 0


async def test_chunks_stop_at_max_jobs_and_resume_from_the_cursor(runtime: Runtime) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    beta = (await runtime.tenants.create("beta")).tenant
    mine = await submit(runtime, acme.id, 7)
    theirs = await submit(runtime, beta.id, 3)
    storage = CountingStorage(runtime.storage)
    service = BulkActions(storage=storage, chunk_size=2)
    caller = Caller(actor="api:bulk", tenant_id=acme.id)
    before = bulk_jobs("cancel")

    assert await service.count(caller=caller, action=BulkAction.CANCEL, where=JobFilter()) == 7
    first = await service.apply(
        caller=caller, action=BulkAction.CANCEL, where=JobFilter(), max_jobs=5
    )
    assert (first.changed, first.has_more) == (5, True)
    assert storage.chunks == [2, 2, 1]  # three transactions, none over the chunk size
    rest = await service.apply(
        caller=caller, action=BulkAction.CANCEL, where=JobFilter(), after=first.last_id
    )
    assert (rest.changed, rest.has_more) == (2, False)
    assert storage.chunks == [2, 2, 1, 2, 0]
    assert bulk_jobs("cancel") - before == 7
    for job_id, expected in [(i, "cancelled") for i in mine] + [(i, "queued") for i in theirs]:
        job = await runtime.storage.job_get(job_id=job_id)
        assert job is not None and str(job.state) == expected
    # A tenant naming another tenant's id in its filter reaches nothing.
    spy = Caller(actor="api:bulk", tenant_id=acme.id)
    where = JobFilter(tenant_id=beta.id)
    assert await service.count(caller=spy, action=BulkAction.CANCEL, where=where) == 0
