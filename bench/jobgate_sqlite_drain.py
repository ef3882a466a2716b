"""`python -m bench.jobgate_sqlite_drain PATH JOBS CONCURRENCY`: the SQLite drain in one process
shaped like `jobgate serve` (every role, the database in-process). Queues JOBS no-op jobs,
then runs the roles and prints one JSON line once every job is terminal."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
import sys
import time

from bench.jobgate_setup import new_tenant, open_runtime, submit_batches
from jobgate import logs
from jobgate.cli.server import run_server
from jobgate.process.roles import available_roles


def _left(conn: sqlite3.Connection) -> bool:
    """Whether any job is still queued or running: two probes of partial indexes, cheap
    enough to ask every 50 ms without slowing the drain it watches."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued') "
        "OR EXISTS (SELECT 1 FROM jobs WHERE state = 'running')"
    ).fetchone()
    return bool(row[0])


def _final(path: str) -> dict[str, float]:
    conn = sqlite3.connect(path, timeout=30)
    try:
        done, bad, last, claims, finishes = conn.execute(
            "SELECT sum(state = 'succeeded'), sum(state IN ('failed', 'cancelled', 'expired')), "
            # one claim (one finish) statement stamps all of its jobs with one time
            "max(completed_at), count(DISTINCT started_at), count(DISTINCT completed_at) "
            "FROM jobs"
        ).fetchone()
        events = conn.execute("SELECT count(*) FROM job_events").fetchone()[0]
    finally:
        conn.close()
    return {
        "done": int(done or 0),
        "bad": int(bad or 0),
        "last": float(last),
        "claims": int(claims),
        "finishes": int(finishes),
        "events": int(events),
    }


async def main(path: str, jobs: int, concurrency: int) -> dict[str, float]:
    runtime = await open_runtime(f"sqlite:///{path}", worker_concurrency=concurrency)
    logs.configure(runtime.settings.log_level)  # as `jobgate serve` does
    try:
        tenant_id, _ = await new_tenant(runtime)
        started = time.monotonic()
        await submit_batches(runtime, tenant_id, jobs, batch=1000)
        fill_s = time.monotonic() - started
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        stop = asyncio.Event()
        watcher = sqlite3.connect(path, timeout=30, check_same_thread=False)
        print("draining", flush=True)
        cpu_before = time.process_time()
        opened = time.time()
        roles = asyncio.create_task(runtime.run_roles(available_roles(), stop, sock=sock))
        try:
            while await asyncio.to_thread(_left, watcher):
                if roles.done():
                    raise RuntimeError("the roles stopped before the queue drained")
                await asyncio.sleep(0.05)
            cpu_s = time.process_time() - cpu_before
        finally:
            watcher.close()
            stop.set()
            await roles
            sock.close()
    finally:
        await runtime.close()
    final = _final(path)
    return {
        **final,
        "seconds": final["last"] - opened,
        "fill_jobs_per_s": jobs / fill_s,
        "cpu_s": cpu_s,
    }


if __name__ == "__main__":
    # The event loop `jobgate serve` runs on.
    result = run_server(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps(result), flush=True)
