"""PgQueuer (https://github.com/janbjorge/pgqueuer) driven through its public API, installed
with its default durability (every table LOGGED), over asyncpg as its own benchmark tool uses.

`python -m bench.peers.pgqueuer_peer worker DSN BATCH_SIZE CONSUMERS [LATENCY_S TASKS]` is one
drain process: CONSUMERS queue managers (one connection each, as PgQueuer's tools/benchmark.py
runs them) in drain mode, each dequeuing BATCH_SIZE jobs at a time; with LATENCY_S, each job
sleeps that long (a provider call's wait) and each manager runs up to TASKS jobs at once.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode

from bench import pg
from bench.context import RunContext
from bench.enqueue_timing import time_enqueues
from bench.peers import gate
from bench.results import Case

ENTRYPOINT = "noop"
CONSUMERS = 5
FILL_CHUNK = 5_000


async def install(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def fill(dsn: str, jobs: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(conn))
        for start in range(0, jobs, FILL_CHUNK):
            size = min(FILL_CHUNK, jobs - start)
            await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)
    finally:
        await conn.close()


async def _worker(
    dsn: str, batch_size: int, consumers: int, latency_s: float = 0.0, tasks: int | None = None
) -> None:
    async def ready() -> tuple[gate.Drain, gate.Close | None]:
        queuers = []
        for _ in range(consumers):
            pgq = PgQueuer(AsyncpgDriver(await asyncpg.connect(dsn)))

            @pgq.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                if latency_s:
                    await asyncio.sleep(latency_s)

            queuers.append(pgq)

        async def drain() -> None:
            await asyncio.gather(
                *(
                    q.run(
                        batch_size=batch_size,
                        mode=QueueExecutionMode.drain,
                        dequeue_timeout=timedelta(seconds=1),
                        max_concurrent_tasks=tasks,
                    )
                    for q in queuers
                )
            )

        return drain, None

    await gate.child(ready)


async def drain(ctx: RunContext, *, processes: int, batch_size: int, jobs: int) -> Case:
    config = {"processes": processes, "batch_size": batch_size, "consumers": CONSUMERS}
    case = Case("drain", "pgqueuer", "postgres", "drain", config, {})
    async with pg.fresh("pgqueuer") as dsn:
        await install(dsn)
        await fill(dsn, jobs)
        await pg.analyze(dsn)
        outcome = await gate.run_children(
            ctx,
            f"drain-pgqueuer-p{processes}-b{batch_size}",
            "bench.peers.pgqueuer_peer",
            dsn,
            [["worker", dsn, str(batch_size), str(CONSUMERS)]] * processes,
        )
        conn = await asyncpg.connect(dsn)
        try:
            left = await conn.fetchval("SELECT count(*) FROM pgqueuer")
        finally:
            await conn.close()
    if left:
        case.error = f"{left} jobs left in the queue after the drain"
        return case
    case.metrics = gate.drain_metrics(outcome, jobs)
    return case


async def enqueue(
    ctx: RunContext,
    *,
    jobs: int,
    concurrencies: tuple[int, ...],
    batch: int,
    batched_jobs: int | None = None,
) -> list[Case]:
    """Single enqueues (one job per call, from each number of concurrent callers) and
    batched ones (`batch` jobs per call)."""
    async with pg.fresh("pgqueuer_enq") as dsn:
        await install(dsn)
        pool = await asyncpg.create_pool(dsn, min_size=10, max_size=10)
        assert pool is not None
        try:
            queries = Queries(AsyncpgPoolDriver(pool))

            async def enqueue_many(size: int) -> None:
                await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)

            return await time_enqueues(
                "pgqueuer",
                "postgres",
                jobs=jobs,
                concurrencies=concurrencies,
                batch=batch,
                batched_jobs=batched_jobs,
                enqueue_one=lambda: queries.enqueue(ENTRYPOINT, None),
                enqueue_many=enqueue_many,
            )
        finally:
            await pool.close()


if __name__ == "__main__":
    if sys.argv[1] != "worker":
        raise SystemExit(
            "usage: python -m bench.peers.pgqueuer_peer worker DSN BATCH CONSUMERS [LATENCY TASKS]"
        )
    extra = (float(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (0.0, None)
    asyncio.run(_worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *extra))
