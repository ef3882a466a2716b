"""Batched enqueue through HTTP: `POST /v1/jobs/bulk` (`enqueue_batch` jobs per call) against
one `jobgate api` process on PostgreSQL, no worker (the jobs stay queued, as in the in-process
batched enqueue and PgQueuer's). Each caller sends its next call when the previous one is
answered; a call counts only if every one of its items was stored. Row "bulk http
keyed": one caller, an `idempotency_key` on every item (new keys each call), so that each item
binds its key with its job."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import orjson

from bench import pg, procs
from bench.context import RunContext
from bench.jobgate_setup import NOOP_SUBMIT, new_tenant, open_runtime
from bench.loadgen import Target
from bench.results import Case

CALLERS = (1, 4)  # one caller: the server's Python and PostgreSQL take turns; four overlap them
KEYED_CALLERS = 1


async def measure(ctx: RunContext, dsn: str) -> list[Case]:
    sizes = ctx.sizes
    runtime = await open_runtime(dsn)
    try:
        _, api_key = await new_tenant(runtime, "bench-bulk-http")
    finally:
        await runtime.close()
    directory = ctx.scratch("enqueue-bulk-http")
    api = procs.start_jobgate(
        "enqueue-bulk-http-api",
        ["api", "--port", "0"],
        env=procs.jobgate_env(dsn, directory),
        workdir=directory,
        log_dir=ctx.log_dir,
    )
    try:
        target = Target(await asyncio.to_thread(procs.wait_listening, api), api_key)
        batch = sizes.enqueue_batch
        plain = target.post("/v1/jobs/bulk", {"jobs": [NOOP_SUBMIT] * batch})
        await _send(target, [plain] * 2, callers=1, batch=batch)  # warm caches and pool
        calls = max(1, sizes.enqueue_batched_jobs // batch)
        keyed = [target.post("/v1/jobs/bulk", _keyed(call, batch)) for call in range(calls)]
        runs = [(callers, [plain] * max(callers, calls), False) for callers in CALLERS]
        cases = []
        for callers, requests, keys in [*runs, (KEYED_CALLERS, keyed, True)]:
            cpu_before, database_before = procs.cpu_seconds(api.pid), await database_cpu(dsn)
            seconds = await _send(target, requests, callers=callers, batch=batch)
            cpu = procs.cpu_seconds(api.pid) - cpu_before
            database = procs.cpu_delta(database_before, await database_cpu(dsn))
            jobs = len(requests) * batch
            metrics: dict[str, float | None] = {
                "jobs": jobs,
                "seconds": round(seconds, 3),
                "jobs_per_s": round(jobs / seconds, 1),
            }
            config = {"batch": batch, "callers": callers}
            name = "bulk http keyed" if keys else "bulk http"
            note = (
                f"CPU ms/job: API process {cpu * 1e3 / jobs:.3f}, "
                f"PostgreSQL {database * 1e3 / jobs:.3f}"
            )
            cases.append(Case("enqueue", "jobgate", "postgres", name, config, metrics, note=note))
        return cases
    finally:
        await asyncio.to_thread(api.stop)


async def database_cpu(dsn: str) -> dict[int, float]:
    """CPU used so far by the PostgreSQL backends serving `dsn`."""
    conn = await asyncpg.connect(dsn)
    try:
        return procs.cpu_of(await pg.backend_pids(conn, pg.database_of(dsn)))
    finally:
        await conn.close()


def _keyed(call: int, batch: int) -> dict[str, Any]:
    return {"jobs": [{**NOOP_SUBMIT, "idempotency_key": f"c{call}-{i}"} for i in range(batch)]}


async def _send(target: Target, requests: list[bytes], *, callers: int, batch: int) -> float:
    """Send the bulk calls from `callers` keep-alive connections; the seconds it took.
    Raises if any call or item was refused (a benchmark of failures measures nothing)."""
    connections = [await target.connect() for _ in range(callers)]
    cursor = iter(requests)

    async def caller(index: int) -> None:
        for request in cursor:
            status, body = await connections[index].request(request)
            answer: dict[str, Any] = orjson.loads(body)
            stored = sum(1 for item in answer.get("data", ()) if item.get("object") == "job")
            if status != 200 or stored != batch:
                raise RuntimeError(f"bulk call answered {status}: {body[:200]!r}")

    try:
        started = time.perf_counter()
        await asyncio.gather(*(caller(i) for i in range(callers)))
        return time.perf_counter() - started
    finally:
        for connection in connections:
            connection.close()
