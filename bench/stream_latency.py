"""Live output streaming overhead: time to first delta through jobgate minus time
to first delta calling the simulator server directly (p50 and p99), and database writes per
streamed token. One process: the simulator server, and jobgate's API and worker roles on
SQLite (a temporary file) or PostgreSQL (`--database-url`, a migrated scratch database).

    python -m bench.stream_latency --jobs 40
    python -m bench.stream_latency --jobs 40 --database-url postgresql://127.0.0.1/bench

Each job streams `--chunks` deltas spread over `--latency` seconds; jobs run one at a time so
the figures are latencies, not queueing. Not part of `python -m bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import socket
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from jobgate.config import ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.simulator.server import Simulator
from jobgate.storage.factory import storage_for_url

PROMPT = "stream " * 300  # a long echo: about 500 output tokens a job


def _body(latency_s: float, chunks: int) -> dict[str, Any]:
    return {
        "model": "gpt-4.1-mini",
        "messages": [{"role": "user", "content": PROMPT}],
        "sim": {"latency_s": latency_s, "chunks": chunks},
    }


async def direct_ttfd(simulator: Simulator, latency_s: float, chunks: int) -> float:
    body = {**_body(latency_s, chunks), "stream": True}
    async with httpx.AsyncClient(base_url=simulator.url, timeout=60) as http:
        started = time.perf_counter()
        async with http.stream("POST", "/v1/chat/completions", json=body) as answer:
            async for line in answer.aiter_lines():
                if (
                    line.startswith("data: {")
                    and '"content":"' in line
                    and '"content":""' not in line
                ):
                    return time.perf_counter() - started
    raise RuntimeError("the simulator sent no delta")


async def jobgate_ttfd(
    http: httpx.AsyncClient, latency_s: float, chunks: int
) -> tuple[float, str, float]:
    payload = {
        "endpoint": "/v1/chat/completions",
        "provider": "upstream",
        "body": _body(latency_s, chunks),
        "stream": True,
    }
    started = time.perf_counter()
    answer = await http.post("/v1/jobs", json=payload)
    answer.raise_for_status()
    submitted = time.perf_counter() - started
    job_id = answer.json()["id"]
    first: float | None = None
    async with http.stream("GET", f"/v1/jobs/{job_id}/stream") as stream:
        async for line in stream.aiter_lines():
            if first is None and line == "event: output.delta":
                first = time.perf_counter() - started
            if line.startswith("event: job."):
                break
    assert first is not None
    return first, job_id, submitted


async def concurrent_lag(
    http: httpx.AsyncClient, storage: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """`--concurrent` jobs at once, each with a connected reader: how late each delta reaches
    its reader after the worker wrote it (same host clock), and this process's CPU and peak
    memory (the simulator, jobgate and the readers together)."""
    received: list[tuple[str, int, float]] = []

    async def one() -> None:
        payload = {
            "endpoint": "/v1/chat/completions",
            "provider": "upstream",
            "body": _body(args.latency, args.chunks),
            "stream": True,
        }
        answer = await http.post("/v1/jobs", json=payload)
        answer.raise_for_status()
        job_id = answer.json()["id"]
        async with http.stream("GET", f"/v1/jobs/{job_id}/stream") as stream:
            async for line in stream.aiter_lines():
                if line.startswith("id: "):
                    received.append((job_id, int(line[4:]), time.time()))
                elif line.startswith("event: job."):
                    return

    cpu_before, wall_before = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(args.concurrent)))
    cpu_s, wall_s = time.process_time() - cpu_before, time.perf_counter() - wall_before
    written: dict[tuple[str, int], float] = {}
    for job_id in {job for job, _, _ in received}:
        for chunk in await storage.job_output_read(job_id=job_id, limit=100_000):
            written[(job_id, chunk.seq)] = chunk.created_at.timestamp()
    lags = [at - written[(job, seq)] for job, seq, at in received if (job, seq) in written]
    return {
        "jobs": args.concurrent,
        "deltas_received": len(received),
        "delta_lag_ms": {"p50": 1000 * percentile(lags, 0.5), "p99": 1000 * percentile(lags, 0.99)},
        "cpu_s": cpu_s,
        "wall_s": wall_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="jobgate-stream-bench-"))
    url = args.database_url or f"sqlite:///{workdir / 'jobgate.db'}"
    async with Simulator() as simulator:
        slots = max(16, args.concurrent)
        config = ProviderConfig(
            kind="openai", base_url=simulator.openai_base_url, concurrency=slots
        )
        registry = ProviderRegistry(
            {"upstream": OpenAIProvider("upstream", config)},
            configs={"upstream": config},
            default="upstream",
        )
        settings = Settings(database_url=url, worker_poll_interval_s=0.5, worker_concurrency=slots)
        storage = storage_for_url(url)
        await storage.open()
        await storage.migrate()
        runtime = Runtime(settings, storage=storage, providers=registry)
        key = (await runtime.tenants.create(f"bench-{int(time.time())}")).api_key
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        stop = asyncio.Event()
        serving = asyncio.create_task(runtime.run_roles(("api", "worker"), stop, sock=sock))
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
            for _ in range(200):
                try:
                    if (await http.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            await jobgate_ttfd(http, args.latency, args.chunks)  # warm up both paths
            await direct_ttfd(simulator, args.latency, args.chunks)
            direct, through, job_ids, submits = [], [], [], []
            for _ in range(args.jobs):
                direct.append(await direct_ttfd(simulator, args.latency, args.chunks))
                seconds, job_id, submit_s = await jobgate_ttfd(http, args.latency, args.chunks)
                through.append(seconds)
                submits.append(submit_s)
                job_ids.append(job_id)
            fanout = await concurrent_lag(http, storage, args) if args.concurrent else None
        chunks = tokens = 0
        for job_id in job_ids:
            chunks += len(await storage.job_output_read(job_id=job_id, limit=100_000))
            job = await storage.job_get(job_id=job_id)
            assert job is not None and job.usage is not None
            tokens += int(job.usage["output_tokens"])
        stop.set()
        await asyncio.wait_for(serving, 30)
        await storage.close()
    added = [t - d for t, d in zip(through, direct, strict=True)]
    return {
        "concurrent": fanout,
        "backend": url.split(":", 1)[0],
        "jobs": args.jobs,
        "latency_s": args.latency,
        "chunks": args.chunks,
        "direct_ttfd_ms": {
            "p50": 1000 * percentile(direct, 0.5),
            "p99": 1000 * percentile(direct, 0.99),
        },
        "jobgate_ttfd_ms": {
            "p50": 1000 * percentile(through, 0.5),
            "p99": 1000 * percentile(through, 0.99),
        },
        "added_ms": {
            "p50": 1000 * percentile(added, 0.5),
            "p99": 1000 * percentile(added, 0.99),
            "mean": 1000 * statistics.fmean(added),
        },
        "submit_ms": {
            "p50": 1000 * percentile(submits, 0.5),
            "p99": 1000 * percentile(submits, 0.99),
        },
        "db_writes_per_token": chunks / tokens if tokens else None,
        "chunks_per_job": chunks / len(job_ids),
        "tokens_per_job": tokens / len(job_ids),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--latency", type=float, default=1.0, help="seconds a job streams")
    parser.add_argument("--chunks", type=int, default=100, help="deltas a job streams")
    parser.add_argument("--database-url", help="default: a temporary SQLite file")
    parser.add_argument(
        "--concurrent", type=int, default=0, help="also run N streaming jobs and readers at once"
    )
    print(orjson.dumps(asyncio.run(main(parser.parse_args())), option=orjson.OPT_INDENT_2).decode())
