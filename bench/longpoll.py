"""Long polling: how soon a parked `GET /v1/jobs/{id}?wait=30` answers after the job moves,
and what many parked polls cost in memory.

Wake-up: the transition is a cancel of a queued job (queued -> cancelled), made by another
client; the delay runs from the cancel's response to the poll's response (it can be slightly
negative when the poll's answer overtakes the cancel's). SQLite: one `jobgate serve --roles
api` process (the wake-up is in-process). PostgreSQL: two `jobgate api` processes, polls on one
and cancels on the other, so every wake-up crosses processes through LISTEN/NOTIFY.

Memory: one load-generator process parks N long polls on one API process, then the API
process's resident memory (VmRSS) is read once it is idle.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench import pg, procs
from bench.context import RunContext
from bench.http_bench import run_loadgen
from bench.jobgate_setup import NOOP_SUBMIT, new_tenant, open_runtime, submit_each
from bench.results import Case

MiB = 1024 * 1024


async def _wake(
    ctx: RunContext,
    backend: str,
    api_key: str,
    poll_url: str,
    cancel_url: str,
    config: dict[str, Any],
) -> Case:
    spec = {
        "mode": "wake",
        "api_key": api_key,
        "poll_url": poll_url,
        "cancel_url": cancel_url,
        "body": NOOP_SUBMIT,
        "trials": ctx.sizes.wake_trials,
        "parallel": 10,
    }
    answer = await run_loadgen(ctx, f"wake-{backend}", spec, timeout_s=600)
    metrics = {
        "trials": answer["trials"],
        "failed": answer["failed"],
        "p50_ms": answer["p50_ms"],
        "p99_ms": answer["p99_ms"],
        "max_ms": answer["max_ms"],
        "from_cancel_sent_p50_ms": answer["from_cancel_sent_p50_ms"],
        "from_cancel_sent_p99_ms": answer["from_cancel_sent_p99_ms"],
    }
    note = "; ".join(answer["failures"][:3])
    return Case("longpoll", "jobgate", backend, "wake", config, metrics, note=note)


def _settled_rss(pid: int, timeout_s: float = 30) -> int:
    """The process's resident memory once it stops growing (two readings 1 s apart within
    0.5%), or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last = procs.rss_bytes(pid)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = procs.rss_bytes(pid)
        if abs(now - last) <= 0.005 * last:
            return now
        last = now
    return last


def _cpu_percent(pid: int, window_s: float = 2.0) -> float:
    before = procs.cpu_seconds(pid)
    time.sleep(window_s)
    return round((procs.cpu_seconds(pid) - before) / window_s * 100, 1)


async def _memory(
    ctx: RunContext,
    backend: str,
    server: procs.Proc,
    base_url: str,
    api_key: str,
    job_ids: list[str],
    config: dict[str, Any],
) -> Case:
    clients = ctx.sizes.longpoll_clients
    baseline = await asyncio.to_thread(_settled_rss, server.pid)
    spec = {
        "mode": "hold",
        "url": base_url,
        "api_key": api_key,
        "job_ids": job_ids,
        "clients": clients,
        "wait_s": ctx.sizes.longpoll_wait_s,
        "connect_per_s": 1000,
    }
    loadgen = procs.start_python(
        f"hold-{backend}",
        "bench.loadgen",
        [json.dumps(spec)],
        workdir=ctx.workdir,
        log_dir=ctx.log_dir,
        stdin=True,
    )
    try:
        sent = json.loads(await asyncio.to_thread(loadgen.line, clients / 100 + 120))
        holding = await asyncio.to_thread(_settled_rss, server.pid)
        busy = await asyncio.to_thread(_cpu_percent, server.pid)
        loadgen.send("release\n")
        answer = json.loads(await asyncio.to_thread(loadgen.line, 120))
    finally:
        await asyncio.to_thread(loadgen.stop)
    metrics = {
        "clients": clients,
        "held": sent["holding"],
        "answered_early": answer["answered_early"],
        "errors": answer["errors"] + sent["connect_failures"],
        "rss_idle_mib": round(baseline / MiB, 1),
        "rss_mib": round(holding / MiB, 1),
        "kib_per_poll": round((holding - baseline) / 1024 / max(1, sent["holding"]), 2),
        # CPU the API process spends while the polls are parked (re-reads, keep-alives)
        "cpu_percent_holding": busy,
    }
    note = f"answered early: {answer['answered_statuses']}" if answer["answered_early"] else ""
    return Case("longpoll", "jobgate", backend, "memory", config, metrics, note=note)


async def _prepare(database_url: str, jobs: int) -> tuple[str, list[str]]:
    runtime = await open_runtime(database_url)
    try:
        tenant_id, api_key = await new_tenant(runtime)
        return api_key, await submit_each(runtime, tenant_id, jobs)
    finally:
        await runtime.close()


def _hold_jobs(ctx: RunContext) -> int:
    return max(1, min(1000, ctx.sizes.longpoll_clients))


async def longpoll_sqlite(ctx: RunContext) -> list[Case]:
    directory: Path = ctx.scratch("longpoll-sqlite")
    url = f"sqlite:///{directory / 'jobgate.db'}"
    api_key, job_ids = await _prepare(url, _hold_jobs(ctx))
    server = procs.start_jobgate(
        "longpoll-sqlite-serve",
        ["serve", "--roles", "api", "--port", "0"],
        env=procs.jobgate_env(url, directory),
        workdir=directory,
        log_dir=ctx.log_dir,
    )
    config = {"server": "serve --roles api"}
    try:
        base_url = await asyncio.to_thread(procs.wait_listening, server)
        wake = await _wake(ctx, "sqlite", api_key, base_url, base_url, config)
        memory = await _memory(ctx, "sqlite", server, base_url, api_key, job_ids, config)
    finally:
        await asyncio.to_thread(server.stop)
    return [wake, memory]


async def longpoll_postgres(ctx: RunContext) -> list[Case]:
    directory = ctx.scratch("longpoll-postgres")
    async with pg.fresh("longpoll") as dsn:
        api_key, job_ids = await _prepare(dsn, _hold_jobs(ctx))
        env = procs.jobgate_env(dsn, directory)
        servers = procs.start_apis(
            "longpoll-pg", 2, env=env, workdir=directory, log_dir=ctx.log_dir
        )
        try:
            poll_url, cancel_url = [
                await asyncio.to_thread(procs.wait_listening, server) for server in servers
            ]
            wake = await _wake(
                ctx,
                "postgres",
                api_key,
                poll_url,
                cancel_url,
                {"server": "2 x api (poll on one, cancel on the other)"},
            )
            memory = await _memory(
                ctx, "postgres", servers[0], poll_url, api_key, job_ids, {"server": "api"}
            )
        finally:
            for server in servers:
                await asyncio.to_thread(server.stop)
    return [wake, memory]
