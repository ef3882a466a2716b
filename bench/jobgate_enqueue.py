"""jobgate's enqueue: JobService.submit (validation, routing, admission and one durable insert
with its event; what POST /v1/jobs does minus HTTP), one job per call, from 1 and from many
concurrent callers; and JobService.submit_many (the batched enqueue: one transaction per
batch), on PostgreSQL and SQLite. A build without submit_many records the gap instead."""

from __future__ import annotations

import time

from bench import pg
from bench.context import RunContext
from bench.jobgate_setup import has_batches, new_tenant, open_runtime, submit_batches, submit_each
from bench.results import Case

NO_BATCH = (
    "jobgate has no batched enqueue: JobStore.job_insert stores one job per call "
    "(no storage method or API route takes many jobs)"
)


async def _measure(ctx: RunContext, backend: str, database_url: str) -> list[Case]:
    sizes = ctx.sizes
    runtime = await open_runtime(database_url)
    cases = []
    try:
        tenant_id, _ = await new_tenant(runtime)
        await submit_each(runtime, tenant_id, min(50, sizes.enqueue_jobs))  # warm caches
        for concurrency in sizes.enqueue_concurrency:
            started = time.monotonic()
            await submit_each(runtime, tenant_id, sizes.enqueue_jobs, concurrency=concurrency)
            seconds = time.monotonic() - started
            cases.append(
                Case(
                    "enqueue",
                    "jobgate",
                    backend,
                    "single",
                    {"concurrency": concurrency},
                    {
                        "jobs": sizes.enqueue_jobs,
                        "seconds": round(seconds, 3),
                        "jobs_per_s": round(sizes.enqueue_jobs / seconds, 1),
                    },
                )
            )
        if has_batches(runtime):
            started = time.monotonic()
            await submit_batches(runtime, tenant_id, sizes.enqueue_jobs, batch=sizes.enqueue_batch)
            seconds = time.monotonic() - started
            cases.append(
                Case(
                    "enqueue",
                    "jobgate",
                    backend,
                    "batched",
                    {"batch": sizes.enqueue_batch},
                    {
                        "jobs": sizes.enqueue_jobs,
                        "seconds": round(seconds, 3),
                        "jobs_per_s": round(sizes.enqueue_jobs / seconds, 1),
                    },
                )
            )
        else:
            cases.append(
                Case("enqueue", "jobgate", backend, "batched", {"batch": sizes.enqueue_batch},
                     {}, error=NO_BATCH)
            )  # fmt: skip
    finally:
        await runtime.close()
    return cases


async def enqueue_postgres(ctx: RunContext) -> list[Case]:
    async with pg.fresh("enqueue") as dsn:
        return await _measure(ctx, "postgres", dsn)


async def enqueue_sqlite(ctx: RunContext) -> list[Case]:
    path = ctx.scratch("enqueue-sqlite") / "jobgate.db"
    return await _measure(ctx, "sqlite", f"sqlite:///{path}")
