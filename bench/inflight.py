"""Long calls in flight: what one `jobgate worker` process costs per call it holds.

N simulated calls of L seconds (the `sim` provider sleeps; nothing else runs) are submitted
to one worker process with N slots (and a `sim` provider cap of N, set in its jobgate.toml).
Once all N are `running`, a window of W seconds (ending before the first call would finish)
measures: the worker's resident memory (VmRSS) against its idle figure before any job, its
CPU while the calls wait, the heartbeat statements that land (each renews every lease at once,
so every running job carries the same `lease_expires_at` and its maximum moves once per
statement), and on PostgreSQL the CPU of this database's server processes and its committed
transactions (pg_stat_database; pg_stat_statements need not be installed). SQLite runs in the
worker's own process, so its CPU is the worker's.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench import pg, procs
from bench.context import RunContext
from bench.jobgate_setup import ENDPOINT, new_tenant, open_runtime
from bench.results import Case
from jobgate.services.jobs import SubmitSpec

MiB = 1024 * 1024
SUBMIT_BATCH = 1000


def _config_toml(calls: int) -> str:
    # The built-in provider, with a cap that admits every call (the default is the worker's).
    return (
        f'[providers.sim]\nkind = "sim"\nmodel_prefixes = ["sim-"]\nconcurrency = {max(calls, 1)}\n'
    )


async def _submit(database_url: str, calls: int, latency_s: float) -> None:
    runtime = await open_runtime(database_url)
    try:
        tenant_id, _ = await new_tenant(runtime)
        body = {
            "model": "sim-echo",
            "messages": [{"role": "user", "content": "a long call"}],
            "sim": {"latency_s": latency_s},
        }
        spec = SubmitSpec(endpoint=ENDPOINT, body=body)
        for start in range(0, calls, SUBMIT_BATCH):
            size = min(SUBMIT_BATCH, calls - start)
            await runtime.jobs.submit_many(tenant_id=tenant_id, specs=[spec] * size)
    finally:
        await runtime.close()


class _Probe:
    """Reads the running jobs' count and lease expiries (PostgreSQL or a SQLite file)."""

    SQL = (
        "SELECT count(*), max(lease_expires_at), count(DISTINCT lease_expires_at) "
        "FROM jobs WHERE state = 'running'"
    )

    def __init__(self, conn: asyncpg.Connection | None, path: Path | None) -> None:
        self._conn = conn
        self._path = path
        self.queries = 0

    async def running(self) -> tuple[int, Any, int]:
        self.queries += 1
        if self._conn is not None:
            row = await self._conn.fetchrow(self.SQL)
            assert row is not None
            return int(row[0]), row[1], int(row[2])
        assert self._path is not None
        return await asyncio.to_thread(self._sqlite)

    def _sqlite(self) -> tuple[int, Any, int]:
        conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, timeout=30)
        try:
            count, latest, distinct = conn.execute(self.SQL).fetchone()
            return int(count), latest, int(distinct)
        finally:
            conn.close()

    async def commits(self, database: str) -> int | None:
        if self._conn is None:
            return None
        self.queries += 1
        value = await self._conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", database
        )
        return int(value)


async def _hold(
    ctx: RunContext,
    backend: str,
    database_url: str,
    probe: _Probe,
    *,
    calls: int,
    database: str | None,
    backends_of: Any,
) -> Case:
    sizes = ctx.sizes
    latency_s = sizes.inflight_latency_s
    config = {"calls": calls, "call_s": latency_s, "worker": "jobgate worker"}
    directory = ctx.scratch(f"inflight-{backend}-{calls}")
    (directory / "jobgate.toml").write_text(_config_toml(calls))
    worker = procs.start_jobgate(
        f"inflight-{backend}-{calls}",
        ["worker", "--concurrency", str(calls)],
        env=procs.jobgate_env(database_url, directory),
        workdir=directory,
        log_dir=ctx.log_dir,
    )
    try:
        await asyncio.to_thread(worker.line, 60)  # the banner: storage is open
        await asyncio.sleep(2.0)
        rss_idle = procs.rss_bytes(worker.pid)
        submitted = time.monotonic()
        await _submit(database_url, calls, latency_s)
        ramp_deadline = submitted + max(60.0, calls / 200)
        running = 0
        while running < calls:
            if time.monotonic() > ramp_deadline:
                raise RuntimeError(f"only {running} of {calls} calls running")
            await asyncio.sleep(0.5)
            running, _, _ = await probe.running()
        ramp_s = time.monotonic() - submitted
        # End the window before the first call could finish (it was claimed after `submitted`).
        window_s = min(sizes.inflight_window_s, latency_s - ramp_s - 5)
        if window_s <= 1:
            raise RuntimeError(f"no window left: the ramp took {ramp_s:.0f} s")
        pids = await backends_of()
        cpu_before = procs.cpu_seconds(worker.pid), procs.cpu_of(pids)
        commits_before = await probe.commits(database or "")
        queries_before = probe.queries
        started = time.monotonic()
        beats = 0
        distinct = 0
        last: datetime | None = None
        rss = 0
        while (elapsed := time.monotonic() - started) < window_s:
            running, latest, distinct = await probe.running()
            if running != calls:
                raise RuntimeError(f"{running} of {calls} calls running during the window")
            if last is not None and latest != last:
                beats += 1
            last = latest
            rss = max(rss, procs.rss_bytes(worker.pid))
            await asyncio.sleep(min(1.0, max(0.0, window_s - elapsed)))
        elapsed = time.monotonic() - started
        worker_cpu = procs.cpu_seconds(worker.pid) - cpu_before[0]
        commits_after = await probe.commits(database or "")
        own = probe.queries - queries_before  # the probe's own transactions, not the worker's
        database_cpu = procs.cpu_delta(cpu_before[1], procs.cpu_of(await backends_of()))
    finally:
        await asyncio.to_thread(worker.stop, 120)
    metrics: dict[str, float | None] = {
        "calls": calls,
        "ramp_s": round(ramp_s, 1),
        "window_s": round(elapsed, 1),
        "rss_idle_mib": round(rss_idle / MiB, 1),
        "rss_mib": round(rss / MiB, 1),
        "kib_per_call": round((rss - rss_idle) / 1024 / calls, 2),
        "worker_cpu_percent": round(worker_cpu / elapsed * 100, 2),
        "heartbeats_per_s": round(beats / elapsed, 3),
        # 1 when one statement renewed every running job's lease (their expiries are equal).
        "lease_expiries_distinct": distinct if beats else None,
        "postgres_cpu_percent": round(database_cpu / elapsed * 100, 2) if database else None,
        "db_commits_per_s": None
        if commits_before is None or commits_after is None
        else round(max(0, commits_after - commits_before - own) / elapsed, 2),
    }
    note = "" if beats else "no heartbeat landed within the window (interval 15 s)"
    return Case("inflight", "jobgate", backend, "hold", config, metrics, note=note)


async def inflight_postgres(ctx: RunContext) -> list[Case]:
    cases = []
    for calls in ctx.sizes.inflight_calls:
        async with pg.fresh("inflight") as dsn:
            await open_runtime_and_close(dsn)  # migrated before the worker starts
            database = pg.database_of(dsn)
            conn = await asyncpg.connect(dsn)
            try:

                async def backends_of(
                    conn: asyncpg.Connection = conn, database: str = database
                ) -> list[int]:
                    return await pg.backend_pids(conn, database)

                cases.append(
                    await _hold(
                        ctx,
                        "postgres",
                        dsn,
                        _Probe(conn, None),
                        calls=calls,
                        database=database,
                        backends_of=backends_of,
                    )
                )
            finally:
                await conn.close()
    return cases


async def inflight_sqlite(ctx: RunContext) -> list[Case]:
    cases = []
    for calls in ctx.sizes.inflight_calls:
        path = ctx.scratch(f"inflight-sqlite-db-{calls}") / "jobgate.db"
        url = f"sqlite:///{path}"
        await open_runtime_and_close(url)

        async def nobody() -> list[int]:
            return []

        cases.append(
            await _hold(
                ctx,
                "sqlite",
                url,
                _Probe(None, path),
                calls=calls,
                database=None,
                backends_of=nobody,
            )
        )
    return cases


async def open_runtime_and_close(database_url: str) -> None:
    runtime = await open_runtime(database_url)
    await runtime.close()
