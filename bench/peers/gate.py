"""A start gate for drain worker processes: each child gets ready (imports, connections),
prints `ready`, waits for `go` on stdin, drains, prints when it finished on the system-wide
monotonic clock (which every process on the host shares), then waits for `bye` before it
closes its connections, so that the parent can read their CPU time first."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence

import asyncpg

from bench import pg, procs
from bench.context import RunContext

Drain = Callable[[], Awaitable[None]]
Close = Callable[[], Awaitable[None]]


async def child(ready: Callable[[], Awaitable[tuple[Drain, Close | None]]]) -> None:
    """Run in the child: `ready()` connects and returns the drain and the clean-up."""
    drain, close = await ready()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    started = time.monotonic()
    await drain()
    print(json.dumps({"started": started, "finished": time.monotonic()}), flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    if close is not None:
        await close()


@dataclasses.dataclass
class Outcome:
    seconds: float  # from opening the gate until the last child finished
    worker_cpu_s: float  # CPU the children used meanwhile
    postgres_cpu_s: float  # CPU the database's backends used meanwhile


def drain_metrics(outcome: Outcome, jobs: int) -> dict[str, float | None]:
    """A drain's figures as every peer reports them."""
    return {
        "jobs": jobs,
        "seconds": round(outcome.seconds, 3),
        "jobs_per_s": round(jobs / outcome.seconds, 1),
        "worker_cpu_ms_per_job": round(outcome.worker_cpu_s * 1000 / jobs, 3),
        "postgres_cpu_ms_per_job": round(outcome.postgres_cpu_s * 1000 / jobs, 3),
    }


async def run_children(
    ctx: RunContext, name: str, module: str, dsn: str, args_per_child: Sequence[Sequence[str]]
) -> Outcome:
    """Start the children, open the gate for all at once, and time them."""
    children = [
        procs.start_python(
            f"{name}-{index}",
            module,
            list(args),
            workdir=ctx.workdir,
            log_dir=ctx.log_dir,
            stdin=True,
        )
        for index, args in enumerate(args_per_child)
    ]
    monitor = await asyncpg.connect(dsn)
    try:
        for proc in children:
            line = await asyncio.to_thread(proc.line, 120)
            if line != "ready":
                raise RuntimeError(f"{proc.name}: expected 'ready', got {line!r}")
        database = pg.database_of(dsn)
        pids = [proc.pid for proc in children]
        backends_before = procs.cpu_of(await pg.backend_pids(monitor, database))
        children_before = procs.cpu_of(pids)
        opened = time.monotonic()
        for proc in children:
            proc.send("go\n")
        finished = []
        for proc in children:
            answer = json.loads(await asyncio.to_thread(proc.line, 900))
            finished.append(float(answer["finished"]))
        postgres_cpu = procs.cpu_delta(
            backends_before, procs.cpu_of(await pg.backend_pids(monitor, database))
        )
        worker_cpu = procs.cpu_delta(children_before, procs.cpu_of(pids))
        for proc in children:
            proc.send("bye\n")
        for proc in children:
            await asyncio.to_thread(proc.wait, 60)
    finally:
        await monitor.close()
        for proc in children:
            await asyncio.to_thread(proc.stop)
    return Outcome(max(finished) - opened, worker_cpu, postgres_cpu)
