"""Exact admission: a queue bound holds under a burst of concurrent submits, on both backends,
also when two API processes (two runtimes with their own pools and caches) share the database:
the count and the insert are decided together (the single writer on SQLite; a per-tenant
advisory lock on PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobgate import errors
from jobgate.config import Settings, TenantLimits
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import QueueCounts
from jobgate.storage.sqlite.store import sqlite_store
from tests.storage.helpers import queued
from tests.support.databases import PostgresTemplate

BURST = 200
SPEC = SubmitSpec(
    endpoint="/v1/chat/completions",
    body={"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
)


@pytest.fixture
async def two_processes(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[list[Runtime]]:
    """Two runtimes on one database, as two API processes would be."""
    dsn = None
    if backend == "postgres":
        template: PostgresTemplate = request.getfixturevalue("pg_template")
        dsn = await template.clone()

    def store() -> Storage:
        if dsn is not None:
            return postgres_store(dsn, pool_size=8)
        return sqlite_store(str(tmp_path / "jobgate.db"))

    settings = Settings(tenant_defaults=TenantLimits(max_queued=5), max_queued_total=1000)
    runtimes = [Runtime(settings, storage=store()) for _ in range(2)]
    for runtime in runtimes:
        await runtime.open()
    yield runtimes
    for runtime in runtimes:
        await runtime.close()
    if dsn is not None:
        await request.getfixturevalue("pg_template").drop_clone(dsn)


async def burst(runtimes: list[Runtime], tenant_id: str, count: int) -> list[Any]:
    calls = [
        runtimes[n % len(runtimes)].jobs.submit(tenant_id=tenant_id, spec=SPEC)
        for n in range(count)
    ]
    return await asyncio.gather(*calls, return_exceptions=True)


async def test_a_burst_against_max_queued_5_admits_exactly_5(two_processes: list[Runtime]) -> None:
    tenant = (await two_processes[0].tenants.create("acme")).tenant
    other = (await two_processes[0].tenants.create("other")).tenant
    answers = await burst(two_processes, tenant.id, BURST)
    accepted = [a for a in answers if not isinstance(a, BaseException)]
    refused = [a for a in answers if isinstance(a, errors.QueueFull)]
    assert len(accepted) == 5, [type(a).__name__ for a in answers if isinstance(a, Exception)]
    assert len(refused) == BURST - 5
    assert all(r.limit == "max_queued" and 1 <= r.retry_after_s <= 120 for r in refused)
    assert await queued(two_processes[1].storage, tenant.id) == 5
    # One tenant's full queue is its own: another still gets its five.
    theirs = await burst(two_processes, other.id, 20)
    assert sum(not isinstance(a, BaseException) for a in theirs) == 5


async def test_the_global_bound_holds_under_a_burst(
    two_processes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    tenants = [(await two_processes[0].tenants.create(f"t{n}")).tenant for n in range(4)]
    for runtime in two_processes:  # each tenant may queue plenty; everyone together only 12
        settings = runtime.settings.model_copy(
            update={"tenant_defaults": TenantLimits(max_queued=0), "max_queued_total": 12}
        )
        monkeypatch.setattr(runtime.limits, "_settings", settings)
    answers = await asyncio.gather(*(burst(two_processes, tenant.id, 50) for tenant in tenants))
    flat = [a for group in answers for a in group]
    assert sum(not isinstance(a, BaseException) for a in flat) == 12
    assert all(
        isinstance(a, errors.QueueFull) and a.limit == "max_queued_total"
        for a in flat
        if isinstance(a, BaseException)
    )


async def test_a_batch_counts_under_the_same_lock(two_processes: list[Runtime]) -> None:
    tenant = (await two_processes[0].tenants.create("acme")).tenant
    batches = [
        two_processes[n % 2].jobs.submit_many(tenant_id=tenant.id, specs=[SPEC] * 2)
        for n in range(20)
    ]
    *batched, singles = await asyncio.gather(
        *batches, burst(two_processes, tenant.id, 40), return_exceptions=True
    )
    assert isinstance(singles, list)
    answers = [*batched, *singles]
    stored = sum(len(a) if isinstance(a, list) else 0 for a in batched)
    stored += sum(not isinstance(a, BaseException) for a in singles)
    assert stored == await queued(two_processes[0].storage, tenant.id)
    assert 4 <= stored <= 5  # two-job batches may leave the fifth place free
    assert all(isinstance(a, errors.QueueFull) for a in answers if isinstance(a, BaseException))


@pytest.mark.parametrize(
    ("queued", "counted"),
    [(0, False), (89_999, False), (90_000, True), (99_999, True)],
)
async def test_far_from_the_bound_a_submit_skips_the_count(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, queued: int, counted: bool
) -> None:
    """The hot path stays one statement until the last count leaves fewer than 10,000
    places below a bound (the default max_queued is 100,000)."""
    tenant = (await runtime.tenants.create("acme")).tenant

    async def counts() -> QueueCounts:
        return QueueCounts({tenant.id: queued}, {})

    monkeypatch.setattr(runtime.storage, "queue_counts", counts)
    job = runtime.jobs.prepare(tenant_id=tenant.id, spec=SPEC)
    _, bounds = await runtime.limits.admit(job)
    assert (bounds is not None and bounds.tenant_max == 100_000) is counted
    for _ in range(3):  # this process's own admissions count until the next sample
        runtime.limits.admitted(tenant.id, 1)
    if queued == 89_999:
        _, bounds = await runtime.limits.admit(job)
        assert bounds is not None and bounds.tenant_max == 100_000
