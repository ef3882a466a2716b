"""Webhook delivery throughput: events per second from the outbox to a local receiver.

    python -m bench.webhooks                                   # SQLite in a temporary folder
    python -m bench.webhooks --database-url postgresql://postgres@127.0.0.1:5432/bench

`python -m bench` runs it too, through `measure()`, on SQLite and on a fresh PostgreSQL database.

Writes N finished jobs (their outbox rows come from the database triggers), then runs the real
dispatcher loop (claim under lease, sign, POST over keep-alive connections, record each attempt
fenced on its lease) until the receiver accepted every event and every result is recorded.
Prints deliveries/s. Against PostgreSQL the database must exist and be empty (it is migrated).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

from prometheus_client import REGISTRY

from bench import pg
from bench.context import RunContext
from bench.results import Case
from jobgate.config import Settings
from jobgate.domain.job import Lease, NewJob
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.roles.dispatcher import Dispatcher
from jobgate.services.tenants import new_webhook_secret
from jobgate.storage.factory import storage_for_url
from jobgate.storage.protocol import Storage
from jobgate.storage.records import NewWebhookEndpoint
from jobgate.testing.receiver import WebhookReceiver


def serve_receiver(conn: Connection) -> None:
    """The receiver, in its own process so that it does not share the dispatcher's GIL."""
    with WebhookReceiver(record_bodies=False) as receiver:
        conn.send(receiver.url)
        conn.recv()  # until told to stop
        conn.send((receiver.count, receiver.max_concurrent))


def delivered() -> float:
    return REGISTRY.get_sample_value("jobgate_webhook_deliveries_succeeded_total") or 0.0


async def fill(storage: Storage, url: str, events: int) -> None:
    tenant = await storage.tenant_create(
        tenant_id="ten_bench", name="bench", webhook_secret=new_webhook_secret()
    )
    await storage.webhook_endpoint_create(
        endpoint=NewWebhookEndpoint(
            id="ep_bench", tenant_id=tenant.id, url=url, secret=new_webhook_secret()
        )
    )
    for n in range(events):
        await storage.job_insert(
            chunks=[
                [
                    NewJob(
                        id=f"job_bench{n:08d}",
                        tenant_id=tenant.id,
                        provider="sim",
                        endpoint="/v1/chat/completions",
                        model="sim-echo",
                        request={"model": "sim-echo", "messages": []},
                        metadata={},
                    )
                ]
            ]
        )
    while claimed := await storage.job_claim(worker_id="bench", limit=500, lease_ttl_s=600):
        await storage.job_finish_many(
            finishes=[
                Finish(
                    lease=Lease(job.id, job.lease_token or ""),
                    state=JobState.SUCCEEDED,
                    reason="completed",
                    result={"ok": True},
                )
                for job in claimed
            ]
        )


async def run(
    database_url: str, events: int, concurrency: int, endpoint_cap: int
) -> dict[str, float]:
    settings = Settings(
        database_url=database_url,
        webhook_allow_http=True,
        webhook_allow_cidrs=("127.0.0.0/8",),
        webhook_concurrency=concurrency,
        webhook_endpoint_concurrency=endpoint_cap,
    )
    storage = storage_for_url(database_url, pool_size=max(10, concurrency // 4))
    await storage.open()
    await storage.migrate()
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.Process(target=serve_receiver, args=(theirs,), daemon=True)
    child.start()
    url = ours.recv()
    try:
        started = time.perf_counter()
        await fill(storage, url, events)
        print(f"wrote {events} events in {time.perf_counter() - started:.1f} s")
        await storage.listen()
        dispatcher = Dispatcher(storage=storage, settings=settings, poll_interval_s=0.2)
        base = delivered()
        started = time.perf_counter()
        loop = asyncio.create_task(dispatcher.run())
        while delivered() - base < events:
            await asyncio.sleep(0.01)
            if loop.done():
                loop.result()
        elapsed = time.perf_counter() - started
        dispatcher.request_stop()
        await loop
        await dispatcher.aclose()
    finally:
        ours.send("stop")
        answered, _ = ours.recv()
        child.join(10)
        await storage.close()
    return {
        "events": events,
        "seconds": round(elapsed, 3),
        "deliveries_per_s": round(events / elapsed, 1),
        "receiver_answered": answered,
    }


async def measure(ctx: RunContext) -> list[Case]:
    """The harness's entry point: deliveries/s on SQLite and, when measured, PostgreSQL."""
    events = 200 if ctx.sizes.name == "smoke" else 1000 if ctx.sizes.name == "quick" else 5000
    config = {"events": events, "concurrency": 64, "endpoint_concurrency": 64}
    cases: list[Case] = []
    sqlite_url = f"sqlite:///{ctx.scratch('webhooks') / 'bench.db'}"
    ctx.say("webhooks sqlite ...")
    cases.append(
        Case(
            "webhooks",
            "jobgate",
            "sqlite",
            "deliveries",
            config,
            await run(sqlite_url, events, 64, 64),
        )
    )
    if ctx.postgres:
        ctx.say("webhooks postgres ...")
        async with pg.fresh("webhooks") as dsn:
            cases.append(
                Case(
                    "webhooks",
                    "jobgate",
                    "postgres",
                    "deliveries",
                    config,
                    await run(dsn, events, 64, 64),
                )
            )
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--endpoint-concurrency", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = args.database_url or f"sqlite:///{Path(folder) / 'bench.db'}"
        figures = asyncio.run(run(url, args.events, args.concurrency, args.endpoint_concurrency))
    print(
        f"{figures['events']} deliveries in {figures['seconds']} s: "
        f"{figures['deliveries_per_s']:.0f} deliveries/s (concurrency {args.concurrency}, "
        f"{args.endpoint_concurrency} per endpoint; the receiver answered "
        f"{figures['receiver_answered']} requests)"
    )


if __name__ == "__main__":
    main()
