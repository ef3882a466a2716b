"""Drain through each transport: N queued no-op jobs, then M jobs whose provider
call takes `--latency-s` (the simulator's wait), 2 `jobgate worker` processes against one
PostgreSQL database, with JOBGATE_TRANSPORT = database, redis://, amqp:// and sqs:// (moto's
server); PgQueuer beside them in the same run (`--pgqueuer`: 2 processes draining the same
numbers of jobs, each job sleeping the same latency). jobgate is timed on the database's clock
from the first claim to the last completion (process start-up is not timed; publishing through
the relay is); PgQueuer from the gate's opening to its last process's end.

    python -m bench.transports_drain [--jobs 2000] [--slow-jobs 0] [--latency-s 1]
        [--transports database,redis,amqp,sqs] [--pgqueuer]

The issue's sizes: `--jobs 20000 --slow-jobs 10000 --latency-s 1 --pgqueuer`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import tempfile
import time
from pathlib import Path

import asyncpg
from tests.support.databases import PostgresTemplate

from bench import pg, procs, sizes
from bench.context import RunContext
from bench.jobgate_setup import ENDPOINT, NOOP_BODY, new_tenant, open_runtime
from bench.peers import gate, pgqueuer_peer
from jobgate.services.jobs import SubmitSpec

# Calls in flight per worker process for the jobs that wait on their provider (jobgate's
# default); no-op jobs drain with 64, as before. PgQueuer gets the same per process.
SLOW_CONCURRENCY = 512
NOOP_CONCURRENCY = 64
PGQ_CONSUMERS = 4
PGQ_BATCH = 100

BROKERS = {
    "database": lambda tag, moto: "database",
    "redis": lambda tag, moto: "redis://127.0.0.1:6379/0",
    "amqp": lambda tag, moto: "amqp://guest:guest@127.0.0.1:5672/",
    "sqs": lambda tag, moto: f"sqs://bench-{tag}?endpoint_url={moto}&region=us-east-1",
}


async def _clear_brokers() -> None:
    """Fresh queues for every run (left-overs of a previous run would be dropped anyway)."""
    import aio_pika
    import redis.asyncio as aioredis

    client = aioredis.from_url("redis://127.0.0.1:6379/0")
    await client.delete("jobgate:ready")
    await client.aclose()
    with contextlib.suppress(Exception):
        connection = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
        async with connection:
            channel = await connection.channel()
            for name in ("jobgate.ready", "jobgate.ready.dead"):
                await channel.queue_delete(name)


async def drain(
    transport: str, url: str, jobs: int, template: PostgresTemplate, latency_s: float = 0.0
) -> float:
    dsn = await template.clone()
    try:
        runtime = await open_runtime(dsn)
        tenant_id, _ = await new_tenant(runtime)
        body = {**NOOP_BODY, "sim": {"latency_s": latency_s}} if latency_s else NOOP_BODY
        spec = SubmitSpec(endpoint=ENDPOINT, body=body)
        for start in range(0, jobs, 1000):
            size = min(1000, jobs - start)
            await runtime.jobs.submit_many(tenant_id=tenant_id, specs=[spec] * size)
        await runtime.close()
        workdir = Path(tempfile.mkdtemp(prefix=f"drain-{transport}-"))
        concurrency = SLOW_CONCURRENCY if latency_s else NOOP_CONCURRENCY
        env = procs.jobgate_env(dsn, workdir, transport=url, worker_concurrency=concurrency)
        env.update(
            AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
        )
        workers = [
            procs.start_jobgate(f"worker{i}", ["worker"], env=env, workdir=workdir, log_dir=workdir)
            for i in range(2)
        ]
        conn = await asyncpg.connect(dsn)
        try:
            deadline = time.monotonic() + 3600
            while time.monotonic() < deadline:
                left = await conn.fetchval(
                    "SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded', 'failed')"
                )
                if left == 0:
                    break
                await asyncio.sleep(0.2)
            seconds = await conn.fetchval(
                "SELECT extract(epoch FROM max(completed_at) - min(started_at)) FROM jobs"
            )
            runs = await conn.fetchval("SELECT max(run_count) FROM jobs")
            assert runs == 1, f"{transport}: a job ran {runs} times"
        finally:
            await conn.close()
            for worker in workers:
                worker.stop()
        return float(seconds)
    finally:
        await template.drop_clone(dsn)


async def pgqueuer_drain(jobs: int, latency_s: float) -> float:
    """PgQueuer draining `jobs` with 2 processes; each sleeps `latency_s` a job, with as many
    jobs at once per process as jobgate's workers hold."""
    workdir = Path(tempfile.mkdtemp(prefix="drain-pgqueuer-"))
    ctx = RunContext(sizes.QUICK, workdir, workdir / "logs", postgres=True, peers=True)
    concurrency = SLOW_CONCURRENCY if latency_s else NOOP_CONCURRENCY
    # PgQueuer wants a manager's tasks to be at least twice its batch: 2 managers of 256.
    consumers = 2 if latency_s else PGQ_CONSUMERS
    args = ["worker", "", str(PGQ_BATCH), str(consumers)]
    if latency_s:
        args += [str(latency_s), str(concurrency // consumers)]

    async with pg.fresh("pgqueuer_drain") as dsn:
        await pgqueuer_peer.install(dsn)
        await pgqueuer_peer.fill(dsn, jobs)
        await pg.analyze(dsn)
        args[1] = dsn
        outcome = await gate.run_children(
            ctx, "drain-pgqueuer", "bench.peers.pgqueuer_peer", dsn, [args] * 2
        )
    return outcome.seconds


def _line(system: str, jobs: int, latency_s: float, seconds: float) -> str:
    kind = f"of {latency_s:g} s" if latency_s else "no-op"
    return f"| {system} | {jobs:,} jobs {kind} | {seconds:7.2f} s | {jobs / seconds:7.0f} jobs/s |"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--slow-jobs", type=int, default=0)
    parser.add_argument("--latency-s", type=float, default=1.0)
    parser.add_argument("--transports", default="database,redis,amqp,sqs")
    parser.add_argument("--pgqueuer", action="store_true")
    args = parser.parse_args()
    from tests.transports.sqs_broker import moto_endpoint, stop_moto

    moto = moto_endpoint() if "sqs" in args.transports else ""
    template = PostgresTemplate()
    await template.create()
    runs = [(args.jobs, 0.0)] + ([(args.slow_jobs, args.latency_s)] if args.slow_jobs else [])
    print("| system | jobs | drained in | rate |\n| --- | --- | --- | --- |", flush=True)
    try:
        if args.pgqueuer:
            for jobs, latency_s in runs:
                seconds = await pgqueuer_drain(jobs, latency_s)
                print(_line("PgQueuer", jobs, latency_s, seconds), flush=True)
        for transport in args.transports.split(","):
            for jobs, latency_s in runs:
                await _clear_brokers()
                url = BROKERS[transport](secrets.token_hex(3), moto)
                seconds = await drain(transport, url, jobs, template, latency_s)
                print(_line(f"jobgate {transport}", jobs, latency_s, seconds), flush=True)
    finally:
        await template.drop()
        stop_moto()


if __name__ == "__main__":
    asyncio.run(main())
