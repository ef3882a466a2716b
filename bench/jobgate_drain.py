"""jobgate's drain: N queued no-op jobs claimed and finished by real workers, with leases,
fencing and the event log all on, timed from the moment the queue opens until the last job
is `succeeded`.

PostgreSQL: `jobgate worker` processes start against a full queue whose rows the harness holds
locked (claims use SKIP LOCKED, so they find nothing), so that process start-up is not timed.
Once every worker is listening the harness commits, which releases the rows and sends the
`q:` wake-up in the same commit. Both ends of the interval are the database's clock: the
commit's clock_timestamp() and the last job's completed_at.

SQLite: one process in the shape of `jobgate serve` (every role; the database is in-process),
started by `python -m bench.jobgate_sqlite_drain`.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime

import asyncpg

from bench import pg, procs
from bench.context import RunContext
from bench.jobgate_setup import new_tenant, open_runtime, submit_batches
from bench.results import Case

SETTLE_S = 0.5  # after every worker listens, let their first (empty) claims go by


async def filled_template(ctx: RunContext, jobs: int) -> str:
    """A migrated database holding `jobs` queued no-op jobs, to copy for each configuration."""
    dsn = await pg.create("drainfill")
    runtime = await open_runtime(dsn)
    try:
        tenant_id, _ = await new_tenant(runtime)
        started = time.monotonic()
        await submit_batches(runtime, tenant_id, jobs, batch=1000)
        ctx.say(f"jobgate: {jobs} jobs queued in {time.monotonic() - started:.1f} s")
    finally:
        await runtime.close()
    await pg.analyze(dsn)
    return dsn


async def _listeners(conn: asyncpg.Connection, database: str) -> int:
    count = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%'",
        database,
    )
    return int(count)


async def drain_postgres(
    ctx: RunContext, template_dsn: str, *, processes: int, concurrency: int, jobs: int
) -> Case:
    async with pg.fresh("drain", template=pg.database_of(template_dsn)) as dsn:
        return await drain_in(ctx, dsn, processes=processes, concurrency=concurrency, jobs=jobs)


async def drain_in(
    ctx: RunContext,
    dsn: str,
    *,
    processes: int,
    concurrency: int,
    jobs: int,
    since: datetime | None = None,
) -> Case:
    """The drain on `dsn`, whose queued jobs are exactly the `jobs` to drain and which runs
    none; with `since`, only the jobs created from then on are counted (a database holding
    other finished jobs)."""
    config = {"processes": processes, "concurrency": concurrency}
    case = Case("drain", "jobgate", "postgres", "drain", config, {})
    floor = since or datetime(1970, 1, 1, tzinfo=UTC)
    database = pg.database_of(dsn)
    conn = await asyncpg.connect(dsn)
    workers: list[procs.Proc] = []
    try:
        gate = conn.transaction()
        await gate.start()
        locked = await conn.fetchval(
            "SELECT count(*) FROM (SELECT id FROM jobs WHERE state = 'queued' FOR UPDATE) AS q"
        )
        if locked != jobs:
            raise RuntimeError(f"expected {jobs} queued jobs, found {locked}")
        env = procs.jobgate_env(dsn, ctx.scratch("drain"))
        for index in range(processes):
            workers.append(
                procs.start_jobgate(
                    f"drain-pg-p{processes}-c{concurrency}-worker{index}",
                    ["worker", "--concurrency", str(concurrency)],
                    env=env,
                    workdir=ctx.scratch("drain"),
                    log_dir=ctx.log_dir,
                )
            )
        for worker in workers:
            await asyncio.to_thread(worker.line, 60)  # the banner: storage is open
        monitor = await asyncpg.connect(dsn)
        try:
            deadline = time.monotonic() + 30
            while await _listeners(monitor, database) < processes:
                if time.monotonic() > deadline:
                    raise RuntimeError("workers did not start listening within 30 s")
                await asyncio.sleep(0.05)
            await asyncio.sleep(SETTLE_S)
            backends = await pg.backend_pids(monitor, database)
            worker_pids = [worker.pid for worker in workers]
            cpu_before = procs.cpu_of(backends), procs.cpu_of(worker_pids)
            await conn.execute("SELECT pg_notify('jobgate', 'q:')")
            opened = await conn.fetchval("SELECT clock_timestamp()")
            await gate.commit()
            deadline = time.monotonic() + max(120, jobs / 100)
            # A cheap probe (partial indexes) every 50 ms; the end time is the database's.
            while await monitor.fetchval(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued') "
                "OR EXISTS (SELECT 1 FROM jobs WHERE state = 'running')"
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the drain did not finish in time")
                await asyncio.sleep(0.05)
            backends = await pg.backend_pids(monitor, database)
            database_cpu = procs.cpu_delta(cpu_before[0], procs.cpu_of(backends))
            worker_cpu = procs.cpu_delta(cpu_before[1], procs.cpu_of(worker_pids))
            row = await monitor.fetchrow(
                "SELECT count(*) FILTER (WHERE state = 'succeeded') AS done, "
                "count(*) FILTER (WHERE state IN ('failed', 'cancelled', 'expired')) "
                "AS bad, max(completed_at) AS last FROM jobs WHERE created_at >= $1",
                floor,
            )
            assert row is not None
            events = await monitor.fetchval(
                "SELECT count(*) FROM job_events WHERE job_created_at >= $1", floor
            )
            # One claim (one finish) statement stamps all its jobs with one time.
            batches = await monitor.fetchrow(
                "SELECT count(DISTINCT started_at) AS claims, "
                "count(DISTINCT completed_at) AS finishes FROM jobs WHERE created_at >= $1",
                floor,
            )
        finally:
            await monitor.close()
    finally:
        for worker in workers:
            await asyncio.to_thread(worker.stop)
        await conn.close()
    seconds = (row["last"] - opened).total_seconds()
    case.metrics = {
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "jobs_per_s": round(row["done"] / seconds, 1),
        "failed": row["bad"],
        "events_per_job": round(events / jobs, 2),
        # Where the time goes: CPU per job in the worker processes and in PostgreSQL's
        # backends for this database (a ceiling on throughput for 2 cores: 2000 / sum).
        "worker_cpu_ms_per_job": round(worker_cpu * 1000 / jobs, 3),
        "postgres_cpu_ms_per_job": round(database_cpu * 1000 / jobs, 3),
        "jobs_per_claim": round(jobs / max(1, batches["claims"]), 1),
        "jobs_per_finish": round(jobs / max(1, batches["finishes"]), 1),
    }
    return case


async def drain_sqlite(ctx: RunContext, *, concurrency: int, jobs: int) -> Case:
    config = {"processes": 1, "concurrency": concurrency}
    directory = ctx.scratch(f"drain-sqlite-c{concurrency}")
    proc = procs.start_python(
        f"drain-sqlite-c{concurrency}",
        "bench.jobgate_sqlite_drain",
        [str(directory / "jobgate.db"), str(jobs), str(concurrency)],
        workdir=directory,
        log_dir=ctx.log_dir,
        env=procs.jobgate_env(f"sqlite:///{directory / 'jobgate.db'}", directory),
    )
    try:
        line = await asyncio.to_thread(proc.line, max(300, jobs / 50))
        if line == "draining":
            if procs.PROFILE_HOOK is not None:
                procs.PROFILE_HOOK(proc)
            line = await asyncio.to_thread(proc.line, max(300, jobs / 50))
    finally:
        await asyncio.to_thread(proc.stop)
    answer = json.loads(line)
    case = Case("drain", "jobgate", "sqlite", "drain", config, {})
    case.metrics = {
        "jobs": jobs,
        "seconds": round(answer["seconds"], 3),
        "jobs_per_s": round(answer["done"] / answer["seconds"], 1),
        "failed": answer["bad"],
        "events_per_job": round(answer["events"] / jobs, 2),
        "fill_jobs_per_s": round(answer["fill_jobs_per_s"], 1),
        "worker_cpu_ms_per_job": round(answer["cpu_s"] * 1000 / jobs, 3),
        "jobs_per_claim": round(jobs / max(1, answer["claims"]), 1),
        "jobs_per_finish": round(jobs / max(1, answer["finishes"]), 1),
    }
    return case
