"""The Storage contract, run against SQLite and PostgreSQL alike."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from jobgate import errors, ids
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Finished, IdempotencyClaim
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, release, submit_one

pytestmark = pytest.mark.asyncio


def claim_key(key: str = "k1", body_hash: str = "h1", ttl_s: float = 86_400) -> IdempotencyClaim:
    return IdempotencyClaim(
        route="POST /v1/jobs", key=key, body_hash=body_hash, status_code=202, ttl_s=ttl_s
    )


async def claim_one(storage: Storage, clock: FakeClock, **kwargs: Any) -> Job:
    jobs = await storage.job_claim(
        worker_id="w1", limit=1, lease_ttl_s=60, now=clock.now(), **kwargs
    )
    assert len(jobs) == 1
    return jobs[0]


def lease(job) -> Lease:  # type: ignore[no-untyped-def]
    return Lease(job.id, job.lease_token)


# -- lifecycle ------------------------------------------------------------------------------


async def test_migrate_is_idempotent(storage: Storage) -> None:
    version = await storage.schema_version()
    assert version >= 1
    assert await storage.migrate() == []
    assert await storage.schema_version() == version


async def test_ping_and_database_now(storage: Storage) -> None:
    await storage.ping()
    assert (await storage.database_now()).tzinfo is not None


# -- tenants and keys ----------------------------------------------------------------------


async def test_tenants(storage: Storage) -> None:
    tenant = await make_tenant(storage, "acme")
    assert (await storage.tenant_get(tenant_id=tenant.id)) == tenant
    assert (await storage.tenant_get(name="acme")) == tenant
    assert await storage.tenant_get(name="nobody") is None
    with pytest.raises(errors.Conflict):
        await storage.tenant_create(tenant_id="ten_other", name="acme", webhook_secret="s")
    await make_tenant(storage, "beta")
    assert [t.name for t in await storage.tenant_list()] == ["acme", "beta"]


async def test_api_keys(storage: Storage) -> None:
    tenant = await make_tenant(storage)
    key = await storage.api_key_create(
        key_id="key_1", tenant_id=tenant.id, key_hash="abc", key_prefix="jg_abc"
    )
    assert key.revoked_at is None
    assert (await storage.api_key_tenant(key_hash="abc")) == tenant
    assert await storage.api_key_tenant(key_hash="nope") is None
    assert [k.id for k in await storage.api_key_list(tenant_id=tenant.id)] == ["key_1"]
    assert await storage.api_key_revoke(key_id="key_1") is True
    assert await storage.api_key_revoke(key_id="key_1") is True  # idempotent
    assert await storage.api_key_revoke(key_id="key_missing") is False
    assert await storage.api_key_tenant(key_hash="abc") is None


# -- submit --------------------------------------------------------------------------------


async def test_insert_writes_job_and_first_event(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    outcome = await submit_one(
        storage,
        job=new_job(
            tenant,
            priority=2,
            max_attempts=4,
            start_timeout_s=30,
            execution_timeout_s=90,
            metadata={"k": "v"},
        ),
        now=clock.now(),
    )
    job = outcome.job
    assert not outcome.replayed and outcome.status_code == 202
    assert job.state is JobState.QUEUED
    assert (job.priority, job.max_attempts, job.attempt) == (2, 4, 0)
    assert job.metadata == {"k": "v"}
    assert job.created_at == clock.now() and job.run_at == clock.now()
    assert job.expires_at == clock.now() + timedelta(seconds=30)
    assert job.execution_timeout_s == 90
    events = await storage.job_events(job_id=job.id)
    assert [(e.from_state, e.to_state, e.actor, e.seq) for e in events] == [
        (None, JobState.QUEUED, "api", 1)
    ]


async def test_idempotent_insert(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    first = await submit_one(storage, job=new_job(acme), idempotency=claim_key(), now=clock.now())
    again = await submit_one(storage, job=new_job(acme), idempotency=claim_key(), now=clock.now())
    assert again.replayed and again.job.id == first.job.id and again.status_code == 202
    with pytest.raises(errors.IdempotencyKeyReused):
        await submit_one(
            storage, job=new_job(acme), idempotency=claim_key(body_hash="h2"), now=clock.now()
        )
    other = await submit_one(storage, job=new_job(beta), idempotency=claim_key(), now=clock.now())
    assert not other.replayed and other.job.id != first.job.id
    assert len(await storage.job_list(tenant_id=acme.id)) == 1


async def test_expired_idempotency_key_is_replaced(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    first = await submit_one(
        storage, job=new_job(tenant), idempotency=claim_key(ttl_s=10), now=clock.now()
    )
    clock.advance(11)
    second = await submit_one(
        storage,
        job=new_job(tenant),
        idempotency=claim_key(body_hash="other", ttl_s=10),
        now=clock.now(),
    )
    assert not second.replayed and second.job.id != first.job.id


async def test_concurrent_idempotent_inserts_make_one_job(storage: Storage) -> None:
    tenant = await make_tenant(storage)
    outcomes = await asyncio.gather(
        *(
            submit_one(storage, job=new_job(tenant), idempotency=claim_key("same"))
            for _ in range(20)
        )
    )
    assert len({o.job.id for o in outcomes}) == 1
    assert sum(not o.replayed for o in outcomes) == 1


# -- read ----------------------------------------------------------------------------------


async def test_get_is_scoped_to_tenant(storage: Storage) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    job = (await submit_one(storage, job=new_job(acme))).job
    assert (await storage.job_get(job_id=job.id, tenant_id=acme.id)) is not None
    assert await storage.job_get(job_id=job.id, tenant_id=beta.id) is None
    assert await storage.job_get(job_id="job_missing") is None


async def test_list_pages_newest_first(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    made = []
    for _ in range(5):
        made.append((await submit_one(storage, job=new_job(tenant), now=clock.now())).job.id)
        clock.advance(1)
    page = await storage.job_list(tenant_id=tenant.id, limit=2)
    assert [j.id for j in page] == made[::-1][:2]
    page2 = await storage.job_list(tenant_id=tenant.id, limit=2, after=page[-1].id)
    assert [j.id for j in page2] == made[::-1][2:4]
    with pytest.raises(errors.InvalidRequest):
        await storage.job_list(tenant_id=tenant.id, after="job_unknown")
    await storage.job_cancel(job_id=made[0], tenant_id=tenant.id, actor="test", now=clock.now())
    cancelled = await storage.job_list(tenant_id=tenant.id, states=[JobState.CANCELLED])
    assert [j.id for j in cancelled] == [made[0]]
    assert await storage.job_list(tenant_id=tenant.id, dead_lettered=True) == []


async def test_events_after_and_limit(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    running = await claim_one(storage, clock)
    await finish_one(
        storage,
        finish=Finish(lease=lease(running), state=JobState.SUCCEEDED, reason="completed"),
        now=clock.now(),
    )
    events = await storage.job_events(job_id=job.id)
    assert [e.seq for e in events] == [1, 2, 3]
    assert [e.seq for e in await storage.job_events(job_id=job.id, after_seq=1, limit=1)] == [2]


# -- claim, heartbeat, finish ----------------------------------------------------------------


async def test_claim_order_and_lease(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    low = (await submit_one(storage, job=new_job(tenant, priority=7), now=clock.now())).job
    high = (await submit_one(storage, job=new_job(tenant, priority=1), now=clock.now())).job
    clock.advance(1)
    claimed = await storage.job_claim(worker_id="w1", limit=1, lease_ttl_s=30, now=clock.now())
    assert [j.id for j in claimed] == [high.id]
    job = claimed[0]
    assert job.state is JobState.RUNNING and job.attempt == 1 and job.run_count == 1
    assert job.lease_owner == "w1" and job.lease_token
    assert job.lease_expires_at == clock.now() + timedelta(seconds=30)
    assert job.started_at == clock.now() and job.phase == "awaiting_provider"
    rest = await storage.job_claim(worker_id="w2", limit=5, lease_ttl_s=30, now=clock.now())
    assert [j.id for j in rest] == [low.id]
    assert await storage.job_claim(worker_id="w3", limit=5, lease_ttl_s=30, now=clock.now()) == []
    events = await storage.job_events(job_id=high.id)
    assert events[-1].from_state is JobState.QUEUED and events[-1].to_state is JobState.RUNNING
    assert events[-1].actor == "w1"


async def test_claim_respects_run_at_and_providers(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant, provider="other"), now=clock.now())
    assert (
        await storage.job_claim(
            worker_id="w", limit=5, lease_ttl_s=30, providers=["sim"], now=clock.now()
        )
        == []
    )
    claimed = await storage.job_claim(
        worker_id="w", limit=5, lease_ttl_s=30, providers=["other"], now=clock.now()
    )
    assert len(claimed) == 1
    retry = Finish(
        lease=lease(claimed[0]), state=JobState.QUEUED, reason="retryable_error", retry_in_s=10
    )
    await finish_one(storage, finish=retry, now=clock.now())
    assert (
        await storage.job_claim(worker_id="w", limit=5, lease_ttl_s=30, now=clock.advance(9)) == []
    )
    assert (
        len(await storage.job_claim(worker_id="w", limit=5, lease_ttl_s=30, now=clock.advance(2)))
        == 1
    )


async def test_concurrent_claims_never_share_a_job(storage: Storage) -> None:
    tenant = await make_tenant(storage)
    for _ in range(30):
        await submit_one(storage, job=new_job(tenant))
    batches = await asyncio.gather(
        *(storage.job_claim(worker_id=f"w{i}", limit=4, lease_ttl_s=30) for i in range(10))
    )
    claimed = [job.id for batch in batches for job in batch]
    assert len(claimed) == len(set(claimed)) == 30


async def test_heartbeat_extends_only_held_leases(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    job = await claim_one(storage, clock)
    clock.advance(20)
    held = await storage.job_heartbeat(
        leases=[lease(job), Lease(job.id, "stale-token"), Lease("job_nope", "x")],
        lease_ttl_s=60,
        now=clock.now(),
    )
    assert [(h.job_id, h.cancel_requested) for h in held] == [(job.id, False)]
    renewed = await storage.job_get(job_id=job.id)
    assert renewed is not None and renewed.lease_expires_at == clock.now() + timedelta(seconds=60)
    await storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api", now=clock.now())
    held = await storage.job_heartbeat(leases=[lease(job)], lease_ttl_s=60, now=clock.now())
    assert held[0].cancel_requested
    assert await storage.job_heartbeat(leases=[], lease_ttl_s=60) == []


async def test_finish_success_is_fenced_and_billed_once(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    job = await claim_one(storage, clock)
    finish = Finish(
        lease=lease(job),
        state=JobState.SUCCEEDED,
        reason="completed",
        result={"answer": 42},
        usage={"input_tokens": 7, "output_tokens": 3},
    )
    done = await finish_one(storage, finish=finish, now=clock.advance(2))
    assert done.state is JobState.SUCCEEDED and done.result == {"answer": 42}
    assert done.completed_at == clock.now() and done.lease_token is None
    assert done.usage == {"input_tokens": 7, "output_tokens": 3}
    with pytest.raises(errors.LeaseLost):
        await finish_one(storage, finish=finish, now=clock.now())
    ledger = await storage.usage_for_job(job_id=job.id)
    assert [(u.kind, u.input_tokens, u.output_tokens) for u in ledger] == [("completion", 7, 3)]
    events = await storage.job_events(job_id=job.id)
    assert [e.to_state for e in events] == [JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED]


async def test_finish_many_reports_lost_leases(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for _ in range(2):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    a, b = await storage.job_claim(worker_id="w", limit=2, lease_ttl_s=30, now=clock.now())
    results = await storage.job_finish_many(
        finishes=[
            Finish(lease=lease(a), state=JobState.SUCCEEDED, reason="completed"),
            Finish(lease=Lease(b.id, "wrong"), state=JobState.SUCCEEDED, reason="completed"),
        ],
        now=clock.now(),
    )
    assert results[0] is not None and results[0].state is JobState.SUCCEEDED
    assert results[1] is None
    assert await storage.job_finish_many(finishes=[]) == []


async def test_finish_many_answers_narrow_rows_in_order(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for _ in range(4):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    jobs = await storage.job_claim(worker_id="w", limit=4, lease_ttl_s=30, now=clock.now())
    a, b, c, d = sorted(jobs, key=lambda j: j.id)
    await storage.job_cancel(job_id=d.id, tenant_id=tenant.id, actor="user", now=clock.now())
    results = await storage.job_finish_many(
        finishes=[
            Finish(
                lease=lease(c),
                state=JobState.QUEUED,
                reason="rate_limited",
                retry_in_s=5,
                count_attempt=False,
            ),
            Finish(lease=lease(a), state=JobState.SUCCEEDED, reason="completed"),
            Finish(lease=lease(b), state=JobState.FAILED, reason="fatal", error={"code": "x"}),
            Finish(lease=lease(d), state=JobState.QUEUED, reason="server_error", retry_in_s=1),
        ],
        now=clock.now(),
    )
    assert results == [
        Finished(c.id, JobState.QUEUED, 0),  # the attempt refunded
        Finished(a.id, JobState.SUCCEEDED, 1),
        Finished(b.id, JobState.FAILED, 1),
        Finished(d.id, JobState.CANCELLED, 1),  # a retry of a cancel-requested job
    ]
    stored = {job.id: await storage.job_get(job_id=job.id) for job in (a, b, c, d)}
    assert {job_id: job.state for job_id, job in stored.items() if job is not None} == {
        a.id: JobState.SUCCEEDED,
        b.id: JobState.FAILED,
        c.id: JobState.QUEUED,
        d.id: JobState.CANCELLED,
    }


async def test_stale_token_in_a_batch_fences_off_only_its_job(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    for _ in range(3):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    a, b, c = await storage.job_claim(worker_id="w", limit=3, lease_ttl_s=30, now=clock.now())
    usage = {"input_tokens": 4, "output_tokens": 2}
    results = await storage.job_finish_many(
        finishes=[
            Finish(lease=lease(a), state=JobState.SUCCEEDED, reason="completed", usage=usage),
            Finish(
                lease=Lease(b.id, "stale"),
                state=JobState.SUCCEEDED,
                reason="completed",
                result={"late": True},
                usage=usage,
            ),
            Finish(lease=lease(c), state=JobState.SUCCEEDED, reason="completed", usage=usage),
        ],
        now=clock.advance(1),
    )
    assert [r.job_id if r is not None else None for r in results] == [a.id, None, c.id]
    fenced = await storage.job_get(job_id=b.id)
    assert fenced is not None and fenced.state is JobState.RUNNING
    assert fenced.lease_token == b.lease_token and fenced.result is None
    assert await storage.usage_for_job(job_id=b.id) == []
    assert [e.to_state for e in await storage.job_events(job_id=b.id)] == [
        JobState.QUEUED,
        JobState.RUNNING,
    ]
    for job in (a, c):
        ledger = await storage.usage_for_job(job_id=job.id)
        assert [(u.kind, u.input_tokens, u.output_tokens) for u in ledger] == [("completion", 4, 2)]
        events = await storage.job_events(job_id=job.id)
        assert [e.to_state for e in events][-1] is JobState.SUCCEEDED
    # The same verdicts again: every lease is spent now, nothing is written twice.
    again = await storage.job_finish_many(
        finishes=[Finish(lease=lease(a), state=JobState.SUCCEEDED, reason="completed")],
        now=clock.now(),
    )
    assert again == [None]
    assert len(await storage.usage_for_job(job_id=a.id)) == 1


async def test_retry_refund_and_dead_letter(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant, max_attempts=2), now=clock.now())
    job = await claim_one(storage, clock)
    retried = await finish_one(
        storage,
        finish=Finish(
            lease=lease(job),
            state=JobState.QUEUED,
            reason="rate_limited",
            retry_in_s=5,
            count_attempt=False,
            error={"code": "rate_limit_exceeded"},
        ),
        now=clock.now(),
    )
    assert retried.state is JobState.QUEUED and retried.attempt == 0
    assert retried.run_at == clock.now() + timedelta(seconds=5)
    assert retried.error == {"code": "rate_limit_exceeded"} and retried.completed_at is None
    clock.advance(5)
    job = await claim_one(storage, clock)
    assert job.attempt == 1 and job.run_count == 2
    failed = await finish_one(
        storage,
        finish=Finish(
            lease=lease(job),
            state=JobState.FAILED,
            reason="attempts_exhausted",
            dead_lettered=True,
            error={"code": "server_error"},
        ),
        now=clock.now(),
    )
    assert failed.state is JobState.FAILED and failed.dead_lettered and failed.result is None
    assert [j.id for j in await storage.job_list(tenant_id=tenant.id, dead_lettered=True)] == [
        job.id
    ]


async def test_retry_of_cancel_requested_job_cancels(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    job = await claim_one(storage, clock)
    await storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api", now=clock.now())
    done = await finish_one(
        storage,
        finish=Finish(lease=lease(job), state=JobState.QUEUED, reason="retryable_error"),
        now=clock.now(),
    )
    assert done.state is JobState.CANCELLED and done.cancel_outcome == "interrupted"
    assert (await storage.job_events(job_id=job.id))[-1].reason == "cancel_requested"


async def test_release_gives_jobs_back(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    job = await claim_one(storage, clock)
    assert await release(
        storage, leases=[lease(job), Lease("job_x", "y")], reason="worker_shutdown", now=clock.now()
    ) == [job.id]
    again = await storage.job_get(job_id=job.id)
    assert again is not None and again.state is JobState.QUEUED and again.attempt == 0
    assert again.run_at == clock.now() and again.lease_token is None


async def test_finish_after_purge_keeps_no_result(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    job = await claim_one(storage, clock)
    purged = await storage.job_purge(job_id=job.id, tenant_id=tenant.id, now=clock.now())
    assert purged is not None and purged.request is None and purged.purged_at == clock.now()
    done = await finish_one(
        storage,
        finish=Finish(
            lease=lease(job), state=JobState.SUCCEEDED, reason="completed", result={"x": 1}
        ),
        now=clock.now(),
    )
    assert done.result is None
    assert await storage.job_purge(job_id=job.id, tenant_id="ten_other") is None


# -- cancel, ignore, reap, expire, redrive ---------------------------------------------------


async def test_cancel_each_state(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    queued = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    cancelled = await storage.job_cancel(
        job_id=queued.id, tenant_id=tenant.id, actor="api", now=clock.now()
    )
    assert cancelled is not None and cancelled.state is JobState.CANCELLED
    assert cancelled.cancel_outcome == "not_started" and cancelled.completed_at == clock.now()
    again = await storage.job_cancel(job_id=queued.id, tenant_id=tenant.id, actor="api")
    assert again is not None and again.state is JobState.CANCELLED
    assert len(await storage.job_events(job_id=queued.id)) == 2  # no second event

    await submit_one(storage, job=new_job(tenant), now=clock.now())
    running = await claim_one(storage, clock)
    asked = await storage.job_cancel(
        job_id=running.id, tenant_id=tenant.id, actor="api", now=clock.now()
    )
    assert asked is not None and asked.state is JobState.RUNNING
    assert asked.cancel_requested_at == clock.now()
    repeat = await storage.job_cancel(
        job_id=running.id, tenant_id=tenant.id, actor="api", now=clock.advance(1)
    )
    assert repeat is not None and repeat.cancel_requested_at == asked.cancel_requested_at
    events = await storage.job_events(job_id=running.id)
    assert [(e.to_state, e.reason) for e in events][-1] == (JobState.RUNNING, "cancel_requested")
    assert await storage.job_cancel(job_id=running.id, tenant_id="ten_other", actor="x") is None


async def test_ignored_events_are_logged_not_applied(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    await storage.job_record_ignored(
        job_id=job.id, to_state=JobState.SUCCEEDED, actor="w9", reason="lease_lost", now=clock.now()
    )
    events = await storage.job_events(job_id=job.id)
    assert [(e.seq, e.to_state, e.applied, e.reason) for e in events][-1] == (
        2,
        JobState.SUCCEEDED,
        False,
        "lease_lost",
    )
    assert (await storage.job_get(job_id=job.id)).state is JobState.QUEUED  # type: ignore[union-attr]
    await storage.job_record_ignored(
        job_id="job_missing", to_state=JobState.FAILED, actor="x", reason="late"
    )


async def test_reaper_verdicts(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for fields in ({}, {"max_attempts": 1}, {}, {"execution_timeout_s": 30}):
        await submit_one(storage, job=new_job(tenant, **fields), now=clock.now())
    jobs = await storage.job_claim(worker_id="w", limit=4, lease_ttl_s=60, now=clock.now())
    requeue, exhaust, cancel, late = sorted(jobs, key=lambda j: j.id)
    await storage.job_cancel(job_id=cancel.id, tenant_id=tenant.id, actor="api", now=clock.now())
    assert (
        await storage.job_reap_expired(limit=10, retry_delay=lambda a: 7, now=clock.advance(59))
    ).total == 0
    result = await storage.job_reap_expired(limit=10, retry_delay=lambda a: 7, now=clock.advance(2))
    assert result.requeued == [requeue.id]
    assert sorted(result.failed) == sorted([exhaust.id, late.id])
    assert result.cancelled == [cancel.id]
    requeued = await storage.job_get(job_id=requeue.id)
    assert requeued is not None and requeued.lost_count == 1
    assert requeued.run_at == clock.now() + timedelta(seconds=7)
    assert requeued.error is not None and requeued.error["code"] == "worker_lost"
    exhausted = await storage.job_get(job_id=exhaust.id)
    assert exhausted is not None and exhausted.dead_lettered
    assert exhausted.error is not None and exhausted.error["code"] == "worker_lost"
    overdue = await storage.job_get(job_id=late.id)
    assert overdue is not None and overdue.error is not None
    assert overdue.error == {
        "code": "deadline_exceeded",
        "message": "the job ran past its execution deadline",
        "type": "timeout_error",  # the same body from the worker, the reaper and the reconciler
    }
    assert not overdue.dead_lettered
    with pytest.raises(errors.LeaseLost):  # the vanished worker comes back: fenced off
        await finish_one(
            storage,
            finish=Finish(lease=lease(requeue), state=JobState.SUCCEEDED, reason="completed"),
            now=clock.now(),
        )
    again = await storage.job_reap_expired(limit=10, retry_delay=lambda a: 7, now=clock.now())
    assert again.total == 0  # idempotent


async def test_second_loss_is_worker_lost_repeatedly(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant, max_attempts=2), now=clock.now())
    for _ in range(2):
        await claim_one(storage, clock)
        await storage.job_reap_expired(limit=10, retry_delay=lambda a: 0, now=clock.advance(61))
    jobs = await storage.job_list(tenant_id=tenant.id)
    assert jobs[0].state is JobState.FAILED and jobs[0].dead_lettered
    assert jobs[0].error is not None and jobs[0].error["code"] == "worker_lost_repeatedly"
    assert jobs[0].lost_count == 2


async def test_concurrent_reapers_act_once(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for _ in range(20):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    await storage.job_claim(worker_id="w", limit=20, lease_ttl_s=1, now=clock.now())
    later = clock.advance(5)
    results = await asyncio.gather(
        *(storage.job_reap_expired(limit=7, retry_delay=lambda a: 0, now=later) for _ in range(4))
    )
    reclaimed = [job_id for r in results for job_id in r.requeued]
    assert len(reclaimed) == len(set(reclaimed))
    rest = await storage.job_reap_expired(limit=50, retry_delay=lambda a: 0, now=later)
    assert len(reclaimed) + len(rest.requeued) == 20


async def test_start_deadline_expires_queued_jobs(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = (
        await submit_one(
            storage,
            job=new_job(
                tenant,
                start_timeout_s=10,
                webhook={"url": "https://h.example/x", "event_types": []},
            ),
            now=clock.now(),
        )
    ).job
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    assert await storage.job_expire_due(limit=10, now=clock.advance(9)) == []
    assert await storage.job_expire_due(limit=10, now=clock.advance(1)) == [job.id]
    expired = await storage.job_get(job_id=job.id)
    assert expired is not None and expired.state is JobState.EXPIRED
    assert expired.error is not None and expired.error["code"] == "start_timeout"
    assert [o.event_type for o in await storage.outbox_for_job(job_id=job.id)] == ["job.expired"]


async def test_redrive(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    hook = {"url": "https://h.example/x", "event_types": []}
    await submit_one(storage, job=new_job(tenant, max_attempts=1, webhook=hook), now=clock.now())
    job = await claim_one(storage, clock)
    with pytest.raises(errors.Conflict):
        await storage.job_redrive(job_id=job.id, tenant_id=tenant.id, actor="op")
    failure = Finish(
        lease=lease(job), state=JobState.FAILED, reason="attempts_exhausted", dead_lettered=True
    )
    await finish_one(storage, finish=failure, now=clock.now())
    assert await storage.job_redrive(job_id=job.id, tenant_id="ten_other", actor="op") is None
    redriven = await storage.job_redrive(
        job_id=job.id, tenant_id=tenant.id, actor="op", now=clock.advance(1)
    )
    assert redriven is not None and redriven.state is JobState.QUEUED
    assert redriven.attempt == 0 and not redriven.dead_lettered and redriven.completed_at is None
    job = await claim_one(storage, clock)
    await finish_one(
        storage,
        finish=Finish(
            lease=lease(job), state=JobState.FAILED, reason="attempts_exhausted", dead_lettered=True
        ),
        now=clock.now(),
    )
    rows = await storage.outbox_for_job(job_id=job.id)
    assert [(r.event_type, r.series) for r in rows] == [("job.failed", 0), ("job.failed", 1)]
    assert rows[0].event_id != rows[1].event_id


# -- the outbox -----------------------------------------------------------------------------


async def test_outbox_follows_the_job_webhook_filter(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    every = {"url": "https://h.example/all", "event_types": []}
    running_only = {"url": "https://h.example/run", "event_types": ["job.running"]}
    a = (await submit_one(storage, job=new_job(tenant, webhook=every), now=clock.now())).job
    b = (await submit_one(storage, job=new_job(tenant, webhook=running_only), now=clock.now())).job
    for job in await storage.job_claim(worker_id="w", limit=2, lease_ttl_s=30, now=clock.now()):
        await finish_one(
            storage,
            finish=Finish(lease=lease(job), state=JobState.SUCCEEDED, reason="completed"),
            now=clock.now(),
        )
    rows_a = await storage.outbox_for_job(job_id=a.id)
    rows_b = await storage.outbox_for_job(job_id=b.id)
    assert [(r.event_type, r.target, r.url) for r in rows_a] == [
        ("job.succeeded", "job", "https://h.example/all")
    ]
    assert [(r.event_type, r.job_status) for r in rows_b] == [("job.running", "running")]
    assert rows_a[0].event_id == ids.event_id(a.id, "job.succeeded", 0)
    assert rows_a[0].state == "pending" and rows_a[0].attempts == 0


async def test_no_webhook_no_outbox(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    await storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api")
    assert await storage.outbox_for_job(job_id=job.id) == []


# -- wake-ups --------------------------------------------------------------------------------


async def test_transitions_wake_watchers(storage: Storage, clock: FakeClock) -> None:
    await storage.listen()
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    cancelled: list[str] = []
    with storage.changes.watch_job(job.id) as changed, storage.changes.on_cancel(cancelled.extend):
        claimed = await claim_one(storage, clock)
        await asyncio.wait_for(changed.wait(), timeout=5)
        changed.clear()
        await storage.job_cancel(job_id=claimed.id, tenant_id=tenant.id, actor="api")
        await asyncio.wait_for(changed.wait(), timeout=5)
        assert claimed.id in cancelled
