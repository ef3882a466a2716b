"""Long calls in flight: what one `jobgate worker` process costs per call it holds.

N simulated calls of L seconds (the `sim` provider sleeps; nothing else runs) are queued with
a start time in the future, one `jobgate worker --concurrency N` process is started (its
`jobgate.toml` raises the `sim` cap to N) and its idle memory read, then the calls are made due
at once. Once all N are `running`, a window of W seconds (ending before the first call would
finish) measures:

- the worker's resident memory (VmRSS) against its idle figure, per call held;
- its CPU while the calls wait;
- the heartbeat statements that land (each renews every lease at once, so every running job
  carries the same `lease_expires_at` and its maximum moves once per statement), and how many
  rows each renewed; on PostgreSQL also each renewal's duration on the server
  (`pg_stat_activity`: from `query_start` to `state_change` once the backend is idle again;
  pg_stat_statements need not be installed);
- on PostgreSQL, the CPU of this database's server processes (from `/proc`) and its committed
  transactions (pg_stat_database). SQLite runs in the worker's own process, so its CPU is the
  worker's.

After the window one renewal of every lease is timed from the harness (the same storage
method the worker calls, with the jobs' own lease tokens), and then every call is awaited: the
run checks that each job finished exactly once (state `succeeded` at attempt 1, one `running`
and one `succeeded` event) and counts the worker's lease-lost lines.

One run from the command line (prints the case as JSON):

    python -m bench.inflight --jobs 10000 --latency-s 30 --backend postgres
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from bench import pg, procs
from bench.context import RunContext
from bench.jobgate_setup import ENDPOINT, new_tenant, open_runtime
from bench.results import Case
from bench.sizes import QUICK
from jobgate.domain.job import Lease
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.sqlite.store import register_functions

MiB = 1024 * 1024
SUBMIT_BATCH = 1000
HOLD_BACK_S = 3600.0  # queued this far ahead, then made due at once (after the idle reading)
HEARTBEAT_INTERVAL_S = 15.0  # the worker's default; only reported
MAX_RSS_BYTES = 8 * 1024 * MiB  # the run stops when the worker grows past this
MAX_RUN_S = 600.0  # ... or when one measurement takes longer than this

# The worker's renewal as it shows in pg_stat_activity (queries.sql `job_heartbeat`).
_HEARTBEAT_TEXT = "%SET lease_expires_at = clock.now + make_interval%"


class TooBig(RuntimeError):
    """The run would exceed the memory or time budget: stopped, not measured."""


def _config_toml(calls: int) -> str:
    # The built-in provider, with a cap that admits every call (the default is the worker's).
    return (
        f'[providers.sim]\nkind = "sim"\nmodel_prefixes = ["sim-"]\nconcurrency = {max(calls, 1)}\n'
    )


async def _submit(database_url: str, calls: int, latency_s: float) -> None:
    """Queue `calls` long calls, due only in HOLD_BACK_S (see `_Probe.release`)."""
    runtime = await open_runtime(database_url)
    try:
        tenant_id, _ = await new_tenant(runtime)
        body = {
            "model": "sim-echo",
            "messages": [{"role": "user", "content": "a long call"}],
            "sim": {"latency_s": latency_s},
        }
        spec = SubmitSpec(
            endpoint=ENDPOINT,
            body=body,
            delay_s=HOLD_BACK_S,
            start_timeout_s=HOLD_BACK_S * 2,
        )
        for start in range(0, calls, SUBMIT_BATCH):
            size = min(SUBMIT_BATCH, calls - start)
            await runtime.jobs.submit_many(tenant_id=tenant_id, specs=[spec] * size)
    finally:
        await runtime.close()


async def _timed_renewal(database_url: str, leases: list[Lease], ttl_s: float) -> tuple[float, int]:
    """One renewal of `leases` through the storage method the worker calls: (seconds, rows)."""
    runtime = await open_runtime(database_url)
    try:
        started = time.perf_counter()
        held = await runtime.storage.job_heartbeat(leases=leases, lease_ttl_s=ttl_s)
        return time.perf_counter() - started, len(held)
    finally:
        await runtime.close()


class _Probe:
    """Reads the running jobs, their lease expiries and the final tally (PostgreSQL or a
    SQLite file)."""

    RUNNING = (
        "SELECT count(*), max(lease_expires_at), count(DISTINCT lease_expires_at), "
        "sum(CASE WHEN lease_expires_at = (SELECT max(lease_expires_at) FROM jobs "
        "WHERE state = 'running') THEN 1 ELSE 0 END) "
        "FROM jobs WHERE state = 'running'"
    )
    TALLY = (
        "SELECT count(*), "
        "sum(CASE WHEN state = 'succeeded' THEN 1 ELSE 0 END), "
        "sum(CASE WHEN attempt = 1 THEN 1 ELSE 0 END), "
        "sum(CASE WHEN state IN ('queued', 'running') THEN 1 ELSE 0 END) "
        "FROM jobs"
    )
    # Jobs whose log does not hold exactly one `running` and one `succeeded` event.
    EVENTS = (
        "SELECT count(*) FROM ("
        " SELECT j.id FROM jobs AS j LEFT JOIN job_events AS e ON e.job_id = j.id AND e.applied"
        " GROUP BY j.id"
        " HAVING sum(CASE WHEN e.to_state = 'running' THEN 1 ELSE 0 END) <> 1"
        "     OR sum(CASE WHEN e.to_state = 'succeeded' THEN 1 ELSE 0 END) <> 1"
        ") AS odd"
    )

    def __init__(self, conn: asyncpg.Connection | None, path: Path | None) -> None:
        self._conn = conn
        self._path = path
        self.queries = 0

    async def _one(self, sql: str) -> tuple[Any, ...]:
        self.queries += 1
        if self._conn is not None:
            row = await self._conn.fetchrow(sql)
            assert row is not None
            return tuple(row)
        return await asyncio.to_thread(self._sqlite, sql)

    def _sqlite(self, sql: str) -> tuple[Any, ...]:
        conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, timeout=30)
        try:
            return tuple(conn.execute(sql).fetchone())
        finally:
            conn.close()

    async def running(self) -> tuple[int, Any, int, int]:
        """(running jobs, latest lease expiry, distinct expiries, jobs at the latest)."""
        count, latest, distinct, at_latest = await self._one(self.RUNNING)
        return int(count), latest, int(distinct), int(at_latest or 0)

    async def release(self) -> None:
        """Make every queued call due now (the worker's next poll claims them)."""
        if self._conn is not None:
            await self._conn.execute("UPDATE jobs SET run_at = now() WHERE state = 'queued'")
            return

        def release() -> None:
            conn = sqlite3.connect(str(self._path), timeout=60)
            register_functions(conn)  # the job trigger calls them
            try:
                with conn:
                    conn.execute(
                        "UPDATE jobs SET run_at = ? WHERE state = 'queued'", (time.time(),)
                    )
            finally:
                conn.close()

        await asyncio.to_thread(release)

    async def leases(self) -> list[Lease]:
        sql = "SELECT id, lease_token FROM jobs WHERE state = 'running'"
        if self._conn is not None:
            return [Lease(r[0], r[1]) for r in await self._conn.fetch(sql)]

        def read() -> list[Lease]:
            conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, timeout=30)
            try:
                return [Lease(r[0], r[1]) for r in conn.execute(sql)]
            finally:
                conn.close()

        return await asyncio.to_thread(read)

    async def tally(self) -> dict[str, int]:
        total, succeeded, first_attempt, open_ = await self._one(self.TALLY)
        (odd,) = await self._one(self.EVENTS)
        return {
            "jobs": int(total),
            "succeeded": int(succeeded or 0),
            "first_attempt": int(first_attempt or 0),
            "unfinished": int(open_ or 0),
            "odd_event_logs": int(odd),
        }

    async def commits(self, database: str) -> int | None:
        if self._conn is None:
            return None
        self.queries += 1
        value = await self._conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", database
        )
        return int(value)

    async def finished_renewals(self, database: str) -> dict[tuple[int, datetime], float]:
        """The worker's renewals that have ended, as PostgreSQL last saw each backend:
        {(pid, started): seconds}. A backend keeps its last statement's text and times until
        it runs another one, so polling often enough catches each renewal."""
        if self._conn is None:
            return {}
        self.queries += 1
        rows = await self._conn.fetch(
            "SELECT pid, query_start, extract(epoch FROM state_change - query_start) "
            "FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() "
            "AND state <> 'active' AND query LIKE $2",
            database,
            _HEARTBEAT_TEXT,
        )
        return {(int(r[0]), r[1]): float(r[2]) for r in rows}


def _thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds per thread of `pid` (the event loop's thread has the process's id)."""
    used = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            used[int(task.name)] = procs.cpu_seconds_at(task / "stat")
        except (OSError, IndexError, ValueError):
            continue
    return used


def _lease_lost_lines(log_path: Path) -> int:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return -1
    return sum(1 for line in text.splitlines() if "lease lost" in line or "lease about" in line)


async def _hold(  # noqa: C901 -- a benchmark case's steps, in order
    ctx: RunContext,
    backend: str,
    database_url: str,
    probe: _Probe,
    *,
    calls: int,
    database: str | None,
    backends_of: Callable[[], Awaitable[list[int]]],
) -> Case:
    sizes = ctx.sizes
    latency_s = sizes.inflight_latency_s
    config = {"calls": calls, "call_s": latency_s, "worker": "jobgate worker"}
    directory = ctx.scratch(f"inflight-{backend}-{calls}")
    (directory / "jobgate.toml").write_text(_config_toml(calls))
    began = time.monotonic()

    def check_budget(rss: int) -> None:
        if rss > MAX_RSS_BYTES:
            raise TooBig(f"stopped: worker RSS {rss / MiB:,.0f} MiB > {MAX_RSS_BYTES / MiB:,.0f}")
        if time.monotonic() - began > MAX_RUN_S:
            raise TooBig(f"stopped: the measurement ran over {MAX_RUN_S:.0f} s")

    submitting = time.monotonic()
    await _submit(database_url, calls, latency_s)
    submit_s = time.monotonic() - submitting
    name = f"inflight-{backend}-{calls}"
    worker = procs.start_jobgate(
        name,
        ["worker", "--concurrency", str(calls)],
        env=procs.jobgate_env(database_url, directory),
        workdir=directory,
        log_dir=ctx.log_dir,
    )
    try:
        await asyncio.to_thread(worker.line, 60)  # the banner: storage is open
        await asyncio.sleep(2.0)
        rss_idle = procs.rss_bytes(worker.pid)
        released = time.monotonic()
        await probe.release()
        ramp_deadline = released + max(60.0, calls / 200)
        running = 0
        while running < calls:
            if time.monotonic() > ramp_deadline:
                raise RuntimeError(f"only {running} of {calls} calls running")
            check_budget(procs.rss_bytes(worker.pid))
            await asyncio.sleep(0.5)
            running, _, _, _ = await probe.running()
        ramp_s = time.monotonic() - released
        # End the window before the first call could finish (it was claimed after `released`).
        window_s = min(sizes.inflight_window_s, latency_s - ramp_s - 3)
        if window_s <= 1:
            raise RuntimeError(f"no window left: the ramp took {ramp_s:.0f} s")
        pids = await backends_of()
        cpu_before = procs.cpu_seconds(worker.pid), procs.cpu_of(pids)
        threads_before = _thread_cpu(worker.pid)
        commits_before = await probe.commits(database or "")
        queries_before = probe.queries
        seen = await probe.finished_renewals(database or "")  # before the window: not counted
        renewals: dict[tuple[int, datetime], float] = {}
        started = time.monotonic()
        beats = 0
        distinct = 0
        rows_per_beat: list[int] = []
        last: Any = None
        rss = 0
        while (elapsed := time.monotonic() - started) < window_s:
            running, latest, distinct, at_latest = await probe.running()
            if running != calls:
                raise RuntimeError(f"{running} of {calls} calls running during the window")
            if last is not None and latest != last:
                beats += 1
                rows_per_beat.append(at_latest)
            last = latest
            for key, seconds in (await probe.finished_renewals(database or "")).items():
                if key not in seen:
                    renewals[key] = seconds
            rss = max(rss, procs.rss_bytes(worker.pid))
            check_budget(rss)
            await asyncio.sleep(min(0.2 if database else 1.0, max(0.0, window_s - elapsed)))
        elapsed = time.monotonic() - started
        worker_cpu = procs.cpu_seconds(worker.pid) - cpu_before[0]
        threads = _thread_cpu(worker.pid)
        loop_cpu = threads.get(worker.pid, 0.0) - threads_before.get(worker.pid, 0.0)
        commits_after = await probe.commits(database or "")
        own = probe.queries - queries_before  # the probe's own transactions, not the worker's
        database_cpu = procs.cpu_delta(cpu_before[1], procs.cpu_of(await backends_of()))
        # One renewal timed from here, while every call still waits.
        leases = await probe.leases()
        timed_s, timed_rows = await _timed_renewal(database_url, leases, 60.0)
        # Then every call finishes: exactly once each?
        finish_deadline = time.monotonic() + latency_s + 120
        while True:
            tally = await probe.tally()
            if tally["unfinished"] == 0 or time.monotonic() > finish_deadline:
                break
            check_budget(procs.rss_bytes(worker.pid))
            await asyncio.sleep(1.0)
    finally:
        await asyncio.to_thread(worker.stop, 120)
    lease_lost = _lease_lost_lines(worker.log_path)
    renewal_ms = sorted(seconds * 1000 for seconds in renewals.values())
    exactly_once = (
        tally["jobs"] == calls
        and tally["succeeded"] == calls
        and tally["first_attempt"] == calls
        and tally["odd_event_logs"] == 0
        and lease_lost == 0
    )
    metrics: dict[str, float | None] = {
        "calls": calls,
        "submit_s": round(submit_s, 1),
        "ramp_s": round(ramp_s, 1),
        "window_s": round(elapsed, 1),
        "rss_idle_mib": round(rss_idle / MiB, 1),
        "rss_mib": round(rss / MiB, 1),
        "kib_per_call": round((rss - rss_idle) / 1024 / calls, 2),
        "worker_cpu_percent": round(worker_cpu / elapsed * 100, 2),
        # The event loop's thread; the rest is the others' (SQLite's writer thread).
        "worker_loop_cpu_percent": round(loop_cpu / elapsed * 100, 2),
        "heartbeats_per_s": round(beats / elapsed, 3),
        "rows_per_heartbeat": min(rows_per_beat) if rows_per_beat else None,
        # 1 when one statement renewed every running job's lease (their expiries are equal).
        "lease_expiries_distinct": distinct if beats else None,
        "heartbeat_server_ms": round(max(renewal_ms), 1) if renewal_ms else None,
        "heartbeat_timed_ms": round(timed_s * 1000, 1),
        "heartbeat_timed_rows": timed_rows,
        "postgres_cpu_percent": round(database_cpu / elapsed * 100, 2) if database else None,
        "db_commits_per_s": None
        if commits_before is None or commits_after is None
        else round(max(0, commits_after - commits_before - own) / elapsed, 2),
        "succeeded": tally["succeeded"],
        "first_attempt": tally["first_attempt"],
        "odd_event_logs": tally["odd_event_logs"],
        "lease_lost_lines": lease_lost,
        "exactly_once": 1 if exactly_once else 0,
    }
    notes = []
    if not beats:
        notes.append(f"no heartbeat landed within the window (interval {HEARTBEAT_INTERVAL_S:g} s)")
    if not exactly_once:
        notes.append(f"NOT exactly once: {tally}, lease-lost lines {lease_lost}")
    return Case("inflight", "jobgate", backend, "hold", config, metrics, note="; ".join(notes))


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
        for stale in path.parent.glob(f"{path.name}*"):  # a reused --workdir starts empty
            stale.unlink()
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


def main(argv: list[str] | None = None) -> int:
    """One in-flight measurement: `python -m bench.inflight --jobs 10000 --latency-s 30
    --backend postgres`. Prints the case as JSON; child logs stay in --workdir."""
    parser = argparse.ArgumentParser(prog="python -m bench.inflight", description=main.__doc__)
    parser.add_argument("--jobs", type=int, default=10_000, help="calls held at once")
    parser.add_argument("--latency-s", type=float, default=30.0, help="each call's length")
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument(
        "--window-s", type=float, default=45.0, help="longest measuring window (ends before calls)"
    )
    parser.add_argument("--workdir", type=Path, default=None, help="scratch (default: a temp dir)")
    options = parser.parse_args(argv)
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="jobgate-inflight-"))
    sizes = dataclasses.replace(
        QUICK,
        name="inflight",
        inflight_calls=(options.jobs,),
        inflight_latency_s=options.latency_s,
        inflight_window_s=options.window_s,
    )
    ctx = RunContext(
        sizes=sizes,
        workdir=workdir,
        log_dir=workdir / "logs",
        postgres=options.backend == "postgres",
        peers=False,
    )
    procs.raise_file_limit(65536)
    measure = inflight_postgres if options.backend == "postgres" else inflight_sqlite
    ctx.say(f"{options.jobs:,} calls of {options.latency_s:g} s on {options.backend} ({workdir})")
    try:
        (case,) = asyncio.run(measure(ctx))
    except TooBig as exc:
        print(json.dumps({"backend": options.backend, "calls": options.jobs, "error": str(exc)}))
        return 2
    print(json.dumps({"backend": case.backend, "config": case.config, **case.metrics,
                      "note": case.note}, default=str))  # fmt: skip
    return 0 if case.metrics.get("exactly_once") else 1


if __name__ == "__main__":
    sys.exit(main())
