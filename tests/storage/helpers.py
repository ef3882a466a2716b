"""Small builders for storage tests."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from jobgate import errors
from jobgate.domain.job import Job, Lease, NewJob
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import LimitsStore, Storage
from jobgate.storage.records import (
    BulkItem,
    BulkResult,
    IdempotencyClaim,
    Inserted,
    QueueLimit,
    SubmitOutcome,
    Tenant,
)

_ids = itertools.count(1)


def new_job(tenant: Tenant, **fields: Any) -> NewJob:
    defaults: dict[str, Any] = {
        "id": f"job_{next(_ids):08d}",
        "tenant_id": tenant.id,
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "request": {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
        "metadata": {},
    }
    defaults.update(fields)
    return NewJob(**defaults)


async def make_tenant(storage: Storage, name: str = "acme") -> Tenant:
    return await storage.tenant_create(
        tenant_id=f"ten_{name}", name=name, webhook_secret=f"whsec_{name}"
    )


async def queued(storage: LimitsStore, tenant_id: str) -> int:
    """A tenant's queued jobs, counted exactly (queue_counts answers every tenant's)."""
    return (await storage.queue_counts()).queued_by_tenant.get(tenant_id, 0)


async def release(
    storage: Storage, leases: Sequence[Lease], reason: str, now: datetime | None = None
) -> list[str]:
    """Give held jobs back as a worker's shutdown does (verdicts.released): queued again with
    the attempt refunded, or cancelled if a cancel was requested. The ids given back."""
    finishes = [
        Finish(lease=held, state=JobState.QUEUED, reason=reason, count_attempt=False)
        for held in leases
    ]
    done = await storage.job_finish_many(finishes=finishes, now=now)
    return [d.job_id for d in done if d is not None]


async def finish_one(storage: Storage, *, finish: Finish, now: datetime | None = None) -> Job:
    """One fenced verdict, and the job read back once it is written; raises errors.LeaseLost
    when the lease is gone (nothing written then)."""
    (done,) = await storage.job_finish_many(finishes=[finish], now=now)
    if done is None:
        raise errors.LeaseLost(finish.lease.job_id)
    job = await storage.job_get(job_id=finish.lease.job_id)
    assert job is not None
    return job


async def wait_until_blocked_by(holder: Any, task: asyncio.Task[Any]) -> None:
    """Return once some backend waits for a lock that `holder` (an asyncpg connection) holds:
    PostgreSQL's word that `task`'s statement has begun and waits, where a fixed sleep only
    hopes so (and on a loaded machine it had not always begun)."""
    holder_pid = holder.get_server_pid()
    async with asyncio.timeout(60):
        while not await holder.fetchval(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
            holder_pid,
        ):
            if task.done():  # it finished or failed without ever waiting: show why
                await task
                raise AssertionError("the statement ended without waiting for the held row")
            await asyncio.sleep(0.01)


class Inserts(Protocol):
    async def job_insert(
        self,
        *,
        chunks: Iterable[Sequence[NewJob]],
        keys: Sequence[IdempotencyClaim | None] | None = None,
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> Inserted: ...


async def submit_one(
    storage: Inserts,
    *,
    job: NewJob,
    idempotency: IdempotencyClaim | None = None,
    queue_limit: QueueLimit | None = None,
    now: datetime | None = None,
) -> SubmitOutcome:
    """Storage.job_insert of one job, answered as a single submit answers: a refused key raised."""
    keys = None if idempotency is None else [idempotency]
    inserted = await storage.job_insert(chunks=[[job]], keys=keys, queue_limit=queue_limit, now=now)
    (outcome,) = inserted.results
    if isinstance(outcome, errors.IdempotencyKeyReused):
        raise outcome
    return outcome


async def insert_many(
    storage: Inserts,
    *,
    jobs: Sequence[NewJob],
    queue_limit: QueueLimit | None = None,
    now: datetime | None = None,
) -> list[Job]:
    """Storage.job_insert of one chunk without keys: the jobs it stored."""
    return (await storage.job_insert(chunks=[jobs], queue_limit=queue_limit, now=now)).jobs


async def insert_streamed(
    storage: Inserts, *, chunks: Iterable[Sequence[NewJob]], now: datetime | None = None
) -> list[Job]:
    """Storage.job_insert of `chunks`, read lazily: the jobs it stored."""
    return (await storage.job_insert(chunks=chunks, now=now)).jobs


async def insert_bulk(
    storage: Inserts,
    *,
    items: Sequence[BulkItem],
    queue_limit: QueueLimit | None = None,
    now: datetime | None = None,
) -> list[BulkResult]:
    """Storage.job_insert of one chunk of keyed (or not) items: one answer per item."""
    inserted = await storage.job_insert(
        chunks=[[item.job for item in items]],
        keys=[item.idempotency for item in items],
        queue_limit=queue_limit,
        now=now,
    )
    return inserted.results
