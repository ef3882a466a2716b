"""jobgate's enqueue: JobService.submit (validation, routing, admission and one durable insert
with its event; what POST /v1/jobs does minus HTTP), one job per call, from 1 and from many
concurrent callers; and JobService.submit_many (the batched enqueue: one transaction per
batch), on PostgreSQL and SQLite; on PostgreSQL also `POST /v1/jobs/bulk` (bench.bulk_http)."""

from __future__ import annotations

from bench import bulk_http, pg
from bench.context import RunContext
from bench.enqueue_timing import time_enqueues
from bench.jobgate_setup import ENDPOINT, NOOP_BODY, new_tenant, open_runtime, submit_each
from bench.results import Case
from jobgate.services.jobs import SubmitSpec


async def _measure(ctx: RunContext, backend: str, database_url: str) -> list[Case]:
    sizes = ctx.sizes
    runtime = await open_runtime(database_url)
    try:
        tenant_id, _ = await new_tenant(runtime)
        await submit_each(runtime, tenant_id, min(50, sizes.enqueue_jobs))  # warm caches
        spec = SubmitSpec(endpoint=ENDPOINT, body=NOOP_BODY)
        return await time_enqueues(
            "jobgate",
            backend,
            jobs=sizes.enqueue_jobs,
            concurrencies=sizes.enqueue_concurrency,
            batch=sizes.enqueue_batch,
            batched_jobs=sizes.enqueue_batched_jobs,
            enqueue_one=lambda: runtime.jobs.submit(tenant_id=tenant_id, spec=spec),
            enqueue_many=lambda size: runtime.jobs.submit_many(
                tenant_id=tenant_id, specs=[spec] * size
            ),
        )
    finally:
        await runtime.close()


async def enqueue_postgres(ctx: RunContext) -> list[Case]:
    async with pg.fresh("enqueue") as dsn:
        cases = await _measure(ctx, "postgres", dsn)
        try:
            return cases + await bulk_http.measure(ctx, dsn)
        except Exception as exc:  # the in-process figures stand; the failure is a case
            failed = Case("enqueue", "jobgate", "postgres", "bulk http", {}, {})
            failed.error = f"{type(exc).__name__}: {exc}"
            return [*cases, failed]


async def enqueue_sqlite(ctx: RunContext) -> list[Case]:
    path = ctx.scratch("enqueue-sqlite") / "jobgate.db"
    return await _measure(ctx, "sqlite", f"sqlite:///{path}")
