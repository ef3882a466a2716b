"""Batched enqueue through HTTP: `POST /v1/jobs/bulk` (`enqueue_batch` jobs per call) against
one `jobgate api` process on PostgreSQL, no worker (the jobs stay queued, as in the in-process
batched enqueue and PgQueuer's). Each caller sends its next call when the previous one is
answered; a call counts only if every one of its items was stored. Timed in rounds, the best
one counting, as every batched enqueue of the harness is (bench.enqueue_timing). Row "bulk http
keyed": one round, one caller, an `idempotency_key` on every item (new keys each call), so
that each item binds its key with its job."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import orjson

from bench import pg, procs
from bench.context import RunContext
from bench.enqueue_timing import BATCHED_ROUNDS
from bench.jobgate_setup import NOOP_SUBMIT, new_tenant, open_runtime
from bench.loadgen import Target
from bench.results import Case

CALLERS = (1, 4)  # one caller: the server's Python and PostgreSQL take turns; four overlap them
KEYED_CALLERS = 1


async def measure(ctx: RunContext, dsn: str) -> list[Case]:
    sizes = ctx.sizes
    # One tenant per row: the rows' rounds together would pass a tenant's default max_queued
    # (100,000), and near it every insert counts the queue exactly (another path).
    rows = [(callers, False) for callers in CALLERS] + [(KEYED_CALLERS, True)]
    runtime = await open_runtime(dsn)
    try:
        api_keys = [
            (await new_tenant(runtime, f"bench-bulk-http-{n}"))[1] for n in range(len(rows))
        ]
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
        address = await asyncio.to_thread(procs.wait_listening, api)
        batch = sizes.enqueue_batch
        calls = max(1, sizes.enqueue_batched_jobs // batch)
        cases = []
        for (callers, keys), api_key in zip(rows, api_keys, strict=True):
            target = Target(address, api_key)
            plain = target.post("/v1/jobs/bulk", {"jobs": [NOOP_SUBMIT] * batch})
            if keys:
                requests = [target.post("/v1/jobs/bulk", _keyed(c, batch)) for c in range(calls)]
            else:
                requests = [plain] * max(callers, calls)
            await _send(target, [plain] * 2, callers=1, batch=batch)  # warm caches and pool
            # Rounds as the in-process batched enqueue and the peers' are timed
            # (bench.enqueue_timing): the best one counts. The keyed row has one round: a key
            # binds once, so a second round would replay.
            rounds = 1 if keys else BATCHED_ROUNDS
            name = "bulk http keyed" if keys else "bulk http"
            config = {"batch": batch, "callers": callers}
            cases.append(await _timed(target, api.pid, dsn, requests, name, config, rounds))
        return cases
    finally:
        await asyncio.to_thread(api.stop)


async def _timed(
    target: Target,
    api_pid: int,
    dsn: str,
    requests: list[bytes],
    name: str,
    config: dict[str, int],
    rounds: int,
) -> Case:
    """`rounds` sends of `requests`: the fastest is the row's figure; the CPU of the API
    process and of PostgreSQL is averaged over every job of every round."""
    batch, callers = config["batch"], config["callers"]
    cpu_before, database_before = procs.cpu_seconds(api_pid), await database_cpu(dsn)
    times = [await _send(target, requests, callers=callers, batch=batch) for _ in range(rounds)]
    cpu = procs.cpu_seconds(api_pid) - cpu_before
    database = procs.cpu_delta(database_before, await database_cpu(dsn))
    jobs = len(requests) * batch
    stored = jobs * rounds
    note = (
        f"CPU ms/job: API process {cpu * 1e3 / stored:.3f}, "
        f"PostgreSQL {database * 1e3 / stored:.3f}"
    )
    if rounds > 1:
        figures = " / ".join(f"{jobs / s:,.0f}" for s in times)
        note = f"best of {rounds} rounds: {figures}; {note}"
    seconds = min(times)
    metrics: dict[str, float | None] = {
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "jobs_per_s": round(jobs / seconds, 1),
    }
    return Case("enqueue", "jobgate", "postgres", name, config, metrics, note=note)


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
