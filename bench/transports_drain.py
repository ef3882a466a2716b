"""Drain through each transport (issue 18): N queued no-op jobs, 2 `jobgate worker` processes
against one PostgreSQL database, with JOBGATE_TRANSPORT = database, redis://, amqp:// and
sqs:// (moto's server). Timed on the database's clock from the first claim to the last
completion (process start-up is not timed; publishing through the relay is).

    python -m bench.transports_drain [--jobs 2000] [--transports database,redis,amqp,sqs]
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

from bench import procs
from bench.jobgate_setup import new_tenant, open_runtime, submit_batches
from jobgate.testing.databases import PostgresTemplate

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


async def drain(transport: str, url: str, jobs: int, template: PostgresTemplate) -> float:
    dsn = await template.clone()
    try:
        runtime = await open_runtime(dsn)
        tenant_id, _ = await new_tenant(runtime)
        await submit_batches(runtime, tenant_id, jobs, batch=1000)
        await runtime.close()
        workdir = Path(tempfile.mkdtemp(prefix=f"drain-{transport}-"))
        env = procs.jobgate_env(dsn, workdir, transport=url, worker_concurrency=64)
        env.update(
            AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1"
        )
        workers = [
            procs.start_jobgate(f"worker{i}", ["worker"], env=env, workdir=workdir, log_dir=workdir)
            for i in range(2)
        ]
        conn = await asyncpg.connect(dsn)
        try:
            deadline = time.monotonic() + 600
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


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--transports", default="database,redis,amqp,sqs")
    args = parser.parse_args()
    from tests.transports.sqs_broker import moto_endpoint, stop_moto

    moto = moto_endpoint() if "sqs" in args.transports else ""
    template = PostgresTemplate()
    await template.create()
    try:
        for transport in args.transports.split(","):
            await _clear_brokers()
            url = BROKERS[transport](secrets.token_hex(3), moto)
            seconds = await drain(transport, url, args.jobs, template)
            print(
                f"{transport:9s} {args.jobs} jobs in {seconds:6.2f} s = "
                f"{args.jobs / seconds:7.0f} jobs/s",
                flush=True,
            )
    finally:
        await template.drop()
        stop_moto()


if __name__ == "__main__":
    asyncio.run(main())
