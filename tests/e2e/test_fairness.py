"""Issue 7's fairness scenario with real processes: one tenant floods 10,000 jobs, another
submits a few; two worker processes on PostgreSQL. The small tenant's jobs start within one
claim cycle and no tenant ever holds more slots than its cap."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import asyncpg
import pytest

from jobgate.services.tenants import TenantService
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.records import LimitOverrides
from jobgate.testing import SequentialIds

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.timeout(180)]

FLOOD_CAP, SMALL_CAP, SLOTS_PER_WORKER = 12, 4, 8
BODY = (
    '{"model": "sim-echo", "messages": [{"role": "user", "content": "x"}], '
    '"sim": {"latency_s": 0.3}}'
)


async def bulk_insert(conn: asyncpg.Connection, tenant_id: str, count: int, prefix: str) -> None:
    await conn.execute(
        f"""
        INSERT INTO jobs (id, tenant_id, state, provider, endpoint, model, request, run_at,
                          created_at, updated_at, event_seq, transition_actor, transition_reason)
        SELECT '{prefix}_' || lpad(n::text, 6, '0'), $1, 'queued', 'sim', '/v1/chat/completions',
               'sim-echo', $2::jsonb, now(), now(), now(), 1, 'test', 'bulk'
          FROM generate_series(1, {count}) AS n
        """,
        tenant_id,
        BODY,
    )


async def test_flooding_tenant_cannot_starve_another(pg_dsn: str) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    tenants = TenantService(storage=storage, ids=SequentialIds())
    flood = (await tenants.create("flood")).tenant
    small = (await tenants.create("small")).tenant
    await storage.tenant_limits_set(
        tenant_id=flood.id, overrides=LimitOverrides(max_running=FLOOD_CAP)
    )
    await storage.tenant_limits_set(
        tenant_id=small.id, overrides=LimitOverrides(max_running=SMALL_CAP)
    )
    conn = await asyncpg.connect(pg_dsn)
    await bulk_insert(conn, flood.id, 10_000, "flood")
    env = {
        **os.environ,
        "JOBGATE_DATABASE_URL": pg_dsn,
        "JOBGATE_WORKER_CONCURRENCY": str(SLOTS_PER_WORKER),
        "JOBGATE_SHUTDOWN_GRACE_S": "0",
    }
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "jobgate.cli",
            "worker",
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    peaks: dict[str, int] = {flood.id: 0, small.id: 0}
    try:
        # Wait until the flood holds every slot it may.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            running: dict[str, int] = {
                row[0]: row[1]
                for row in await conn.fetch(
                    "SELECT tenant_id, count(*) FROM jobs WHERE state = 'running' GROUP BY 1"
                )
            }
            if running.get(flood.id, 0) >= FLOOD_CAP:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the workers never ran the flood")
        submitted_at = time.monotonic()
        await bulk_insert(conn, small.id, 8, "small")
        started_within: float | None = None
        while time.monotonic() - submitted_at < 20:
            counts: dict[str, int] = {
                row[0]: row[1]
                for row in await conn.fetch(
                    "SELECT tenant_id, count(*) FROM jobs WHERE state = 'running' GROUP BY 1"
                )
            }
            for tenant_id in peaks:
                peaks[tenant_id] = max(peaks[tenant_id], counts.get(tenant_id, 0))
            started = await conn.fetchval(
                "SELECT count(*) FROM jobs WHERE tenant_id = $1 AND started_at IS NOT NULL",
                small.id,
            )
            if started_within is None and started >= SMALL_CAP:
                started_within = time.monotonic() - submitted_at
            done = await conn.fetchval(
                "SELECT count(*) FROM jobs WHERE tenant_id = $1 AND state = 'succeeded'", small.id
            )
            if done == 8:
                break
            await asyncio.sleep(0.02)
        print(
            f"\nsmall tenant: first {SMALL_CAP} jobs started within {started_within:.3f} s;"
            f" peak running flood={peaks[flood.id]} small={peaks[small.id]}"
        )
        # One claim cycle: a slot frees every ~0.3 s / 16 slots; generous for a loaded host.
        assert started_within is not None and started_within < 3.0
        assert peaks[flood.id] <= FLOOD_CAP and peaks[small.id] <= SMALL_CAP
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM jobs WHERE tenant_id = $1 AND state = 'succeeded'", small.id
            )
            == 8
        )
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                await asyncio.wait_for(worker.wait(), 30)
            except TimeoutError:
                worker.kill()
                await worker.wait()
        await conn.close()
        await storage.close()
