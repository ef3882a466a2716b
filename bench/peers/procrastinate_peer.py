"""procrastinate (https://github.com/procrastinate-org/procrastinate) driven through its public
API over psycopg 3, with a connection pool the size of jobgate's default (10).

`python -m bench.peers.procrastinate_peer worker DSN CONCURRENCY` is one drain process: a
worker with `wait=False` (it stops once the queue is empty), LISTEN/NOTIFY on, jobs kept.
"""

from __future__ import annotations

import asyncio
import sys

import asyncpg
from procrastinate import App, PsycopgConnector

from bench import pg
from bench.context import RunContext
from bench.enqueue_timing import time_enqueues
from bench.peers import gate
from bench.results import Case

POOL_SIZE = 10
FILL_CHUNK = 5_000


def make_app(dsn: str) -> App:
    app = App(connector=PsycopgConnector(conninfo=dsn, min_size=POOL_SIZE, max_size=POOL_SIZE))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app


async def install(dsn: str) -> None:
    app = make_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def fill(dsn: str, jobs: int) -> None:
    app = make_app(dsn)
    async with app.open_async():
        task = app.tasks["noop"]
        for start in range(0, jobs, FILL_CHUNK):
            size = min(FILL_CHUNK, jobs - start)
            await task.batch_defer_async(*({} for _ in range(size)))


async def _worker(dsn: str, concurrency: int) -> None:
    async def ready() -> tuple[gate.Drain, gate.Close | None]:
        app = make_app(dsn)
        await app.open_async()

        async def drain() -> None:
            await app.run_worker_async(
                concurrency=concurrency, wait=False, install_signal_handlers=False
            )

        return drain, app.close_async

    await gate.child(ready)


async def drain(ctx: RunContext, *, processes: int, concurrency: int, jobs: int) -> Case:
    config = {"processes": processes, "concurrency": concurrency}
    case = Case("drain", "procrastinate", "postgres", "drain", config, {})
    async with pg.fresh("procrastinate") as dsn:
        await install(dsn)
        await fill(dsn, jobs)
        await pg.analyze(dsn)
        outcome = await gate.run_children(
            ctx,
            f"drain-procrastinate-p{processes}-c{concurrency}",
            "bench.peers.procrastinate_peer",
            dsn,
            [["worker", dsn, str(concurrency)]] * processes,
        )
        conn = await asyncpg.connect(dsn)
        try:
            done = await conn.fetchval(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            )
        finally:
            await conn.close()
    if done != jobs:
        case.error = f"only {done} of {jobs} jobs succeeded"
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
    """Single defers (one job per call, from each number of concurrent callers) and batched
    ones (`batch` jobs per call)."""
    async with pg.fresh("procrastinate_enq") as dsn:
        await install(dsn)
        app = make_app(dsn)
        async with app.open_async():
            task = app.tasks["noop"]
            return await time_enqueues(
                "procrastinate",
                "postgres",
                jobs=jobs,
                concurrencies=concurrencies,
                batch=batch,
                batched_jobs=batched_jobs,
                enqueue_one=task.defer_async,
                enqueue_many=lambda size: task.batch_defer_async(*({} for _ in range(size))),
            )


if __name__ == "__main__":
    if sys.argv[1] != "worker":
        raise SystemExit("usage: python -m bench.peers.procrastinate_peer worker DSN CONCURRENCY")
    asyncio.run(_worker(sys.argv[2], int(sys.argv[3])))
