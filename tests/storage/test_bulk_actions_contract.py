"""Bulk actions by filter, a chunk per call, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.postgres.store import is_postgres
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import (
    finish_one,
    make_tenant,
    new_job,
    submit_one,
    wait_until_blocked_by,
)

pytestmark = pytest.mark.asyncio

ACTOR = "operator:alice"
QUEUED, RUNNING, FAILED = JobState.QUEUED, JobState.RUNNING, JobState.FAILED


async def queued(storage: Storage, tenant: Tenant, clock: FakeClock, **fields: Any) -> Job:
    return (await submit_one(storage, job=new_job(tenant, **fields), now=clock.now())).job


async def run(storage: Storage, clock: FakeClock, job: Job) -> Job:
    """Claim `job` (it must be the only queued one)."""
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    assert claimed.id == job.id
    return claimed


async def fail(
    storage: Storage, clock: FakeClock, job: Job, *, code: str, dead: bool = True
) -> Job:
    claimed = await run(storage, clock, job)
    return await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job.id, claimed.lease_token or ""),
            state=FAILED,
            reason="fatal",
            error={"code": code, "message": "no", "type": "provider_error"},
            dead_lettered=dead,
        ),
        now=clock.now(),
    )


async def apply_all(
    storage: Storage, clock: FakeClock, action: BulkAction, where: JobFilter, limit: int
) -> list[list[str]]:
    """Every chunk of an action, one call (one transaction) each, until one comes back short."""
    chunks: list[list[str]] = []
    after = None
    while True:
        chunk = await storage.job_bulk_apply(
            where=where,
            action=action,
            actor=ACTOR,
            reason=f"bulk_{action}: outage",
            after_id=after,
            limit=limit,
            now=clock.now(),
        )
        chunks.append(chunk.job_ids)
        after = chunk.last_id or after
        if len(chunk.job_ids) < limit:
            return chunks


async def last_event(storage: Storage, job_id: str) -> tuple[str, str, str, str | None]:
    event = (await storage.job_events(job_id=job_id))[-1]
    return (str(event.from_state), str(event.to_state), event.actor, event.reason)


async def test_cancel_by_filter_in_chunks(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    running = await queued(storage, acme, clock, model="sim-a")
    running = await run(storage, clock, running)
    targets = [await queued(storage, acme, clock, model="sim-a") for _ in range(4)]
    other_model = await queued(storage, acme, clock, model="sim-b")
    other_tenant = await queued(storage, beta, clock, model="sim-a")
    where = JobFilter(tenant_id=acme.id, model="sim-a")

    assert await storage.job_bulk_count(where=where, action=BulkAction.CANCEL) == 5
    chunks = await apply_all(storage, clock, BulkAction.CANCEL, where, limit=2)
    assert [len(c) for c in chunks] == [2, 2, 1]  # three transactions of at most two jobs
    assert sorted(i for c in chunks for i in c) == sorted([running.id] + [j.id for j in targets])
    assert [c for chunk in chunks for c in chunk] == sorted(c for chunk in chunks for c in chunk)
    for job in targets:
        assert (await storage.job_get(job_id=job.id)).state is JobState.CANCELLED  # type: ignore[union-attr]
        assert await last_event(storage, job.id) == (
            "queued", "cancelled", ACTOR, "bulk_cancel: outage",
        )  # fmt: skip
    still = await storage.job_get(job_id=running.id)
    assert still is not None and still.state is RUNNING and still.cancel_requested_at is not None
    assert await last_event(storage, running.id) == (
        "running", "running", ACTOR, "bulk_cancel: outage",
    )  # fmt: skip
    for job in (other_model, other_tenant):
        assert (await storage.job_get(job_id=job.id)).state is QUEUED  # type: ignore[union-attr]
    assert await storage.job_bulk_count(where=where, action=BulkAction.CANCEL) == 0
    assert (await apply_all(storage, clock, BulkAction.CANCEL, where, limit=2)) == [[]]


async def test_a_bulk_redrive_starts_clean_as_a_single_redrive_does(
    storage: Storage, clock: FakeClock
) -> None:
    """A redriven job must be able to start: a fresh start deadline (the submit's, from now; the
    old one has long passed) and no old cancel request (it would cancel the new series)."""
    acme = await make_tenant(storage, "acme")
    job = await queued(storage, acme, clock, start_timeout_s=100)
    claimed = await run(storage, clock, job)
    await storage.job_cancel(job_id=job.id, tenant_id=acme.id, actor="client", now=clock.now())
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job.id, claimed.lease_token or ""),
            state=FAILED,
            reason="fatal",
            error={"code": "server_error", "message": "no", "type": "provider_error"},
            dead_lettered=True,
        ),
        now=clock.now(),
    )
    clock.advance(1000)  # long past the first start deadline
    where = JobFilter(error_code="server_error")
    assert await apply_all(storage, clock, BulkAction.REDRIVE, where, limit=10) == [[job.id]]
    redriven = await storage.job_get(job_id=job.id)
    assert redriven is not None and redriven.state is QUEUED
    assert redriven.expires_at == clock.now() + timedelta(seconds=100)
    assert (redriven.cancel_requested_at, redriven.cancel_outcome) == (None, None)
    again = await run(storage, clock, job)
    [beat] = await storage.job_heartbeat(
        leases=[Lease(job.id, again.lease_token or "")], lease_ttl_s=60, now=clock.now()
    )
    assert not beat.cancel_requested  # the new series does not cancel itself


async def test_redrive_by_error_code_refuses_purged_jobs(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    outage = [
        await fail(storage, clock, await queued(storage, acme, clock), code="server_error")
        for _ in range(3)
    ]
    purged = await fail(storage, clock, await queued(storage, acme, clock), code="server_error")
    await storage.job_purge(job_id=purged.id, tenant_id=acme.id, now=clock.now())
    not_dead = await fail(
        storage, clock, await queued(storage, acme, clock), code="server_error", dead=False
    )
    other_code = await fail(storage, clock, await queued(storage, acme, clock), code="invalid")
    where = JobFilter(error_code="server_error")

    assert await storage.job_bulk_count(where=where, action=BulkAction.REDRIVE) == 3
    chunks = await apply_all(storage, clock, BulkAction.REDRIVE, where, limit=2)
    assert [len(c) for c in chunks] == [2, 1]
    for job in outage:
        redriven = await storage.job_get(job_id=job.id)
        assert redriven is not None and redriven.state is QUEUED and not redriven.dead_lettered
        assert redriven.attempt == 0
        assert await last_event(storage, job.id) == (
            "failed", "queued", ACTOR, "bulk_redrive: outage",
        )  # fmt: skip
    for job in (purged, not_dead, other_code):
        assert (await storage.job_get(job_id=job.id)).state is FAILED  # type: ignore[union-attr]
    claimed = await storage.job_claim(worker_id="w", limit=5, lease_ttl_s=60, now=clock.now())
    assert sorted(j.id for j in claimed) == sorted(j.id for j in outage)


async def test_delete_by_metadata_and_time_range(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    early = await queued(storage, acme, clock, metadata={"batch": "7", "team": "x"})
    clock.advance(60)
    start = clock.now()
    live = await queued(storage, acme, clock, metadata={"batch": "7"})
    done = await queued(storage, acme, clock, metadata={"batch": "7"}, priority=0)
    done = await fail(storage, clock, done, code="invalid")
    other_batch = await queued(storage, acme, clock, metadata={"batch": "8"})
    numeric = await queued(storage, acme, clock, metadata={"batch": 7})
    where = JobFilter(metadata={"batch": "7"}, created_after=start)

    assert await storage.job_bulk_count(where=where, action=BulkAction.DELETE) == 2
    chunks = await apply_all(storage, clock, BulkAction.DELETE, where, limit=1)
    assert sorted(i for c in chunks for i in c) == sorted([live.id, done.id])
    gone_live = await storage.job_get(job_id=live.id)
    assert gone_live is not None and gone_live.state is JobState.CANCELLED
    assert gone_live.request is None and gone_live.purged_at is not None
    assert await last_event(storage, live.id) == (
        "queued", "cancelled", ACTOR, "bulk_delete: outage",
    )  # fmt: skip
    gone_done = await storage.job_get(job_id=done.id)
    assert gone_done is not None and gone_done.state is FAILED and gone_done.purged_at is not None
    # A purge moves no state: its event is written by the bulk delete itself.
    assert await last_event(storage, done.id) == (
        "failed", "failed", ACTOR, "bulk_delete: outage",
    )  # fmt: skip
    for job in (early, other_batch, numeric):
        kept = await storage.job_get(job_id=job.id)
        assert kept is not None and kept.request is not None and kept.state is QUEUED
    assert await storage.job_bulk_count(where=where, action=BulkAction.DELETE) == 0


async def test_filters_by_state_provider_and_cursor(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    jobs = [await queued(storage, acme, clock) for _ in range(4)]
    later = JobFilter(
        states=(QUEUED,), provider="sim", created_before=clock.now() + timedelta(seconds=1)
    )
    assert await storage.job_bulk_count(where=later, action=BulkAction.CANCEL) == 4
    assert (
        await storage.job_bulk_count(where=JobFilter(provider="other"), action=BulkAction.CANCEL)
        == 0
    )
    assert (
        await storage.job_bulk_count(where=JobFilter(states=(RUNNING,)), action=BulkAction.CANCEL)
        == 0
    )
    ids = sorted(j.id for j in jobs)
    chunk = await storage.job_bulk_apply(
        where=later,
        action=BulkAction.CANCEL,
        actor=ACTOR,
        reason="bulk_cancel",
        after_id=ids[1],
        limit=10,
        now=clock.now(),
    )
    assert chunk.job_ids == ids[2:] and chunk.last_id == ids[-1]


def reference(job: Job, where: JobFilter, action: BulkAction) -> bool:
    """The filter and the eligibility rules of domain.bulk, in Python."""
    checks = [
        where.tenant_id is None or job.tenant_id == where.tenant_id,
        where.states is None or job.state in where.states,
        where.provider is None or job.provider == where.provider,
        where.model is None or job.model == where.model,
        where.error_code is None or (job.error or {}).get("code") == where.error_code,
        where.created_after is None or job.created_at >= where.created_after,
        where.created_before is None or job.created_at < where.created_before,
        where.metadata is None or all(job.metadata.get(k) == v for k, v in where.metadata.items()),
        where.dead_lettered is None or job.dead_lettered == where.dead_lettered,
    ]
    eligible = {
        BulkAction.CANCEL: job.state is QUEUED
        or (job.state is RUNNING and job.cancel_requested_at is None),
        BulkAction.REDRIVE: job.state is FAILED and job.dead_lettered and job.purged_at is None,
        BulkAction.DELETE: job.purged_at is None,
    }[action]
    return all(checks) and eligible


async def test_counts_agree_with_the_rules_for_many_filters(
    storage: Storage, clock: FakeClock
) -> None:
    """Both dialects' SQL filters (JSON containment on PostgreSQL, json_each on SQLite) and
    eligibility rules against a Python reference, over seeded random jobs and filters."""
    import random

    rng = random.Random(20261201)
    tenants = [await make_tenant(storage, "acme"), await make_tenant(storage, "beta")]
    metadata_values: list[Any] = ["1", "2", 1, None]
    start = clock.now()
    plans = [
        (
            rng.choice(tenants),
            rng.choice(["sim-a", "sim-b"]),
            {k: v for k in ("a", "b") if (v := rng.choice(metadata_values)) is not None},
            rng.choice(["queued", "running", "failed", "dead", "purged_dead"]),
        )
        for _ in range(30)
    ]
    # The queued ones last: each other job must be the only one a claim can take.
    for tenant, model, metadata, fate in sorted(plans, key=lambda p: p[3] == "queued"):
        clock.advance(rng.choice([1, 10, 100]))
        job = await queued(storage, tenant, clock, model=model, metadata=metadata)
        if fate == "running":
            await run(storage, clock, job)
        elif fate != "queued":
            failed = await fail(
                storage, clock, job, code=rng.choice(["x", "y"]), dead=fate != "failed"
            )
            if fate == "purged_dead":
                await storage.job_purge(job_id=failed.id, tenant_id=failed.tenant_id)
    jobs = [
        job
        for tenant in tenants
        for job in await storage.admin_job_list(tenant_id=tenant.id, limit=100)
    ]
    assert len(jobs) == 30
    nonzero = 0
    for _ in range(60):

        def maybe(value: Any) -> Any:
            return value if rng.random() < 0.35 else None

        after = start + timedelta(seconds=rng.randint(0, 1500))
        where = JobFilter(
            tenant_id=maybe(rng.choice(tenants).id),
            states=maybe(tuple(rng.sample(list(JobState), rng.randint(1, 3)))),
            model=maybe(rng.choice(["sim-a", "sim-b", "sim-c"])),
            error_code=maybe(rng.choice(["x", "y"])),
            created_after=maybe(after),
            created_before=maybe(after + timedelta(seconds=rng.randint(1, 1500))),
            metadata=maybe({k: rng.choice(["1", "2"]) for k in rng.sample(["a", "b"], 1)}),
            dead_lettered=maybe(rng.choice([True, False])),
        )
        for action in BulkAction:
            expected = sum(reference(job, where, action) for job in jobs)
            nonzero += expected > 0
            assert await storage.job_bulk_count(where=where, action=action) == expected, (
                where,
                action,
            )
    assert nonzero > 40  # the filters are not all empty-handed


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_a_chunk_that_loses_a_deadlock_runs_again(
    backend: str, storage: Storage, clock: FakeClock
) -> None:
    """A chunk locks in id order; another transaction locking the same rows in the opposite
    order (a worker's heartbeat can) deadlocks with it. PostgreSQL aborts the chunk, which is
    run again once the other commits: no error reaches the caller, every job is changed."""
    import asyncpg

    acme = await make_tenant(storage, "acme")
    first, second = sorted(
        [await queued(storage, acme, clock) for _ in range(2)], key=lambda j: j.id
    )
    assert is_postgres(storage)
    other = await asyncpg.connect(storage.engine.dsn)
    try:
        # Only the chunk's backend may run the deadlock check, so that PostgreSQL aborts the
        # chunk and not this transaction (the check runs in whichever waiter's deadlock_timeout
        # fires first; on a loaded machine that need not be the one that began waiting first).
        await other.execute("SET deadlock_timeout = '5min'")
        holding = other.transaction()
        await holding.start()
        await other.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", second.id)
        chunk = asyncio.create_task(
            storage.job_bulk_apply(
                where=JobFilter(), action=BulkAction.CANCEL, actor=ACTOR,
                reason="bulk_cancel", after_id=None, limit=10, now=clock.now(),
            )
        )  # fmt: skip
        # The chunk holds `first` (it locks in id order) once it waits for `second`, held here:
        # wait for that wait, not for a fixed time (a fixed sleep let this transaction ask for
        # `first` before the chunk had it, and then this one lost the deadlock).
        await wait_until_blocked_by(other, chunk)
        await other.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", first.id)
        await holding.commit()  # after PostgreSQL aborted the chunk, the first time
        done = await asyncio.wait_for(chunk, 60)
    finally:
        await other.close()
    assert done.job_ids == [first.id, second.id]
    for job in (first, second):
        assert (await storage.job_get(job_id=job.id)).state is JobState.CANCELLED  # type: ignore[union-attr]
