"""jobgate's HTTP API under an open-loop load from a separate process on loopback: submit
(POST /v1/jobs) and status (GET /v1/jobs/{id}) at fixed arrival rates, with workers draining
what is submitted. SQLite: one `jobgate serve` process. PostgreSQL: `jobgate api` plus
`jobgate worker`, as they are deployed to scale out."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import asyncpg

from bench import pg, procs
from bench.context import RunContext
from bench.jobgate_setup import NOOP_SUBMIT, new_tenant, open_runtime, submit_each
from bench.results import Case

STATUS_JOBS = 1_000  # jobs whose status the status load reads, round robin


async def run_loadgen(ctx: RunContext, name: str, spec: dict[str, Any], timeout_s: float) -> Any:
    proc = procs.start_python(
        name, "bench.loadgen", [json.dumps(spec)], workdir=ctx.workdir, log_dir=ctx.log_dir
    )
    try:
        return json.loads(await asyncio.to_thread(proc.line, timeout_s))
    finally:
        await asyncio.to_thread(proc.stop)


async def _load(
    ctx: RunContext,
    backend: str,
    base_url: str,
    api_key: str,
    job_ids: list[str],
    servers: list[procs.Proc],
    config: dict[str, Any],
    dsn: str | None = None,
    sqlite_path: Path | None = None,
    system: str = "jobgate",
    ops: tuple[tuple[str, tuple[int, ...]], ...] | None = None,
    wait_idle: bool = True,
    name: str | None = None,
) -> list[Case]:
    """Each op at each of its rates (default: the sizes' submit and status rates), with the
    workers idle first unless `wait_idle` is False (a backlog nobody drains)."""
    sizes = ctx.sizes
    cases = []
    if ops is None:
        ops = (("submit", sizes.http_submit_rates), ("status", sizes.http_status_rates))
    for op, rates in ops:
        for rate in rates:
            spec = {
                "mode": "open",
                "op": op,
                "url": base_url,
                "api_key": api_key,
                "rate": rate,
                "seconds": sizes.http_seconds,
                "connections": sizes.http_connections,
                "body": NOOP_SUBMIT,
                "job_ids": job_ids,
            }
            # What earlier loads submitted is still being drained: let the workers finish it,
            # so that each rate is measured on its own.
            if system == "jobgate" and wait_idle:
                await _wait_idle(dsn, sqlite_path)
            database_before = await _database_cpu(dsn)
            cpu_before = [procs.cpu_seconds(s.pid) for s in servers]
            answer = await run_loadgen(
                ctx,
                f"{name or f'http-{system}-{backend}'}-{op}-{rate}",
                spec,
                timeout_s=sizes.http_seconds * 3 + 90,
            )
            cpu = sum(
                procs.cpu_seconds(s.pid) - b for s, b in zip(servers, cpu_before, strict=True)
            )
            database_cpu = procs.cpu_delta(database_before, await _database_cpu(dsn))
            ok = answer["ok"]
            errors = sum(v for k, v in answer["statuses"].items() if not k.startswith("2"))
            metrics = {
                "offered_per_s": answer["offered_per_s"],
                "achieved_per_s": answer["achieved_per_s"],
                "p50_ms": answer["p50_ms"],
                "p99_ms": answer["p99_ms"],
                "max_ms": answer["max_ms"],
                "errors": errors + answer["unanswered"],
                "server_cpu_ms_per_request": round(cpu * 1000 / ok, 3) if ok else None,
                "postgres_cpu_ms_per_request": (
                    round(database_cpu * 1000 / ok, 3) if ok and dsn else None
                ),
                "sender_max_lag_ms": answer["sender_max_lag_ms"],
            }
            note = "; ".join(answer["failures"][:3])
            cases.append(
                Case(
                    "http",
                    system,
                    backend,
                    op,
                    {
                        **config,
                        "rate": rate,
                        "connections": sizes.http_connections,
                        "seconds": sizes.http_seconds,
                    },
                    metrics,
                    note=note,
                )
            )
            await asyncio.sleep(1)
    return cases


_BUSY = (
    "SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued') "
    "OR EXISTS (SELECT 1 FROM jobs WHERE state = 'running')"
)


async def _wait_idle(dsn: str | None, sqlite_path: Path | None, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if dsn is not None:
            conn = await asyncpg.connect(dsn)
            try:
                busy = await conn.fetchval(_BUSY)
            finally:
                await conn.close()
        elif sqlite_path is not None:
            busy = await asyncio.to_thread(_sqlite_busy, sqlite_path)
        else:
            return
        if not busy:
            return
        await asyncio.sleep(0.5)


def _sqlite_busy(path: Path) -> bool:
    conn = sqlite3.connect(path, timeout=30)
    try:
        return bool(conn.execute(_BUSY).fetchone()[0])
    finally:
        conn.close()


async def _database_cpu(dsn: str | None) -> dict[int, float]:
    """CPU used so far by the PostgreSQL backends serving `dsn` (every process's pool)."""
    if dsn is None:
        return {}
    conn = await asyncpg.connect(dsn)
    try:
        return procs.cpu_of(await pg.backend_pids(conn, pg.database_of(dsn)))
    finally:
        await conn.close()


async def http_sqlite(ctx: RunContext) -> list[Case]:
    directory = ctx.scratch("http-sqlite")
    url = f"sqlite:///{directory / 'jobgate.db'}"
    runtime = await open_runtime(url)
    try:
        tenant_id, api_key = await new_tenant(runtime)
        job_ids = await submit_each(runtime, tenant_id, STATUS_JOBS)
    finally:
        await runtime.close()
    server = procs.start_jobgate(
        "http-sqlite-serve",
        ["serve", "--port", "0"],
        env=procs.jobgate_env(url, directory),
        workdir=directory,
        log_dir=ctx.log_dir,
    )
    try:
        base_url = await asyncio.to_thread(procs.wait_listening, server)
        return await _load(
            ctx,
            "sqlite",
            base_url,
            api_key,
            job_ids,
            [server],
            {"server": "serve"},
            sqlite_path=directory / "jobgate.db",
        )
    finally:
        await asyncio.to_thread(server.stop)


async def http_postgres(ctx: RunContext) -> list[Case]:
    directory = ctx.scratch("http-postgres")
    async with pg.fresh("http") as dsn:
        runtime = await open_runtime(dsn)
        try:
            tenant_id, api_key = await new_tenant(runtime)
            job_ids = await submit_each(runtime, tenant_id, STATUS_JOBS)
        finally:
            await runtime.close()
        env = procs.jobgate_env(dsn, directory)
        api = procs.start_jobgate(
            "http-pg-api",
            ["api", "--port", "0"],
            env=env,
            workdir=directory,
            log_dir=ctx.log_dir,
        )
        worker = procs.start_jobgate(
            "http-pg-worker", ["worker"], env=env, workdir=directory, log_dir=ctx.log_dir
        )
        try:
            base_url = await asyncio.to_thread(procs.wait_listening, api)
            await asyncio.to_thread(worker.line, 60)
            return await _load(
                ctx,
                "postgres",
                base_url,
                api_key,
                job_ids,
                [api],
                {"server": "api + worker"},
                dsn=dsn,
            )
        finally:
            for proc in (api, worker):
                await asyncio.to_thread(proc.stop)


ANCHOR = "fastapi-asyncpg"


async def http_anchor(ctx: RunContext) -> list[Case]:
    """The bare FastAPI + uvicorn + asyncpg endpoint (bench.peers.fastapi_anchor) under the
    same load as jobgate's API on PostgreSQL: the floor jobgate's submit and status are
    compared with."""
    from bench.peers import fastapi_anchor

    directory = ctx.scratch("http-anchor")
    async with pg.fresh("anchor") as dsn:
        job_ids = await fastapi_anchor.prepare(dsn, STATUS_JOBS)
        server = procs.start_python(
            "http-anchor",
            "bench.peers.fastapi_anchor",
            [dsn],
            workdir=directory,
            log_dir=ctx.log_dir,
        )
        try:
            base_url = await asyncio.to_thread(procs.wait_listening, server)
            await asyncio.sleep(1)  # the pool opens after the banner
            return await _load(
                ctx,
                "postgres",
                base_url,
                "unused",
                job_ids,
                [server],
                {"server": "uvicorn"},
                dsn=dsn,
                system=ANCHOR,
            )
        finally:
            await asyncio.to_thread(server.stop)


FLOOR = "null-server"


async def http_floor(ctx: RunContext) -> list[Case]:
    """The load generator against a server that answers at once (bench.peers.null_http),
    at the same rates and settings: the latency the generator and the machine add on their
    own, under every other row of the section."""
    directory = ctx.scratch("http-floor")
    server = procs.start_python(
        "http-floor", "bench.peers.null_http", [], workdir=directory, log_dir=ctx.log_dir
    )
    try:
        base_url = await asyncio.to_thread(procs.wait_listening, server)
        return await _load(
            ctx, "none", base_url, "unused", ["0"], [server], {"server": "null"}, system=FLOOR
        )
    finally:
        await asyncio.to_thread(server.stop)
