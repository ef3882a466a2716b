"""The provider store contract (background mode, reconciler, provider events), on SQLite and
PostgreSQL alike."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from jobgate import errors
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import ReconcileDeferral, Settlement, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def running(storage: Storage, clock: FakeClock, tenant: Tenant, **fields: object) -> Job:
    await submit_one(storage, job=new_job(tenant, **fields), now=clock.now())
    jobs = await storage.job_claim(worker_id="w1", limit=1, lease_ttl_s=60, now=clock.now())
    assert len(jobs) == 1
    return jobs[0]


async def at_provider(
    storage: Storage,
    clock: FakeClock,
    tenant: Tenant,
    pid: str = "resp_1",
    in_s: float = 30,
    **fields: object,
) -> Job:
    job = await running(storage, clock, tenant, **fields)
    lease = Lease(job.id, job.lease_token or "")
    await storage.job_provider_submitting(lease=lease, now=clock.now())
    return await storage.job_background_accept(
        lease=lease,
        provider_job_id=pid,
        provider_status="queued",
        reconcile_in_s=in_s,
        now=clock.now(),
    )


def settlement(job: Job, state: JobState = JobState.SUCCEEDED, **fields: object) -> Settlement:
    values: dict[str, object] = {
        "job_id": job.id,
        "provider_job_id": job.provider_job_id or "",
        "state": state,
        "reason": "completed",
        "actor": "reconciler",
    }
    values.update(fields)
    return Settlement(**values)  # type: ignore[arg-type]


async def test_submitting_and_accept_are_fenced(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = await running(storage, clock, tenant)
    with pytest.raises(errors.LeaseLost):
        await storage.job_provider_submitting(lease=Lease(job.id, "not-the-token"))
    lease = Lease(job.id, job.lease_token or "")
    await storage.job_provider_submitting(lease=lease, now=clock.now())
    sending = await storage.job_get(job_id=job.id)
    assert sending is not None
    assert (sending.phase, sending.creation_outcome) == ("submitting", "sending")
    with pytest.raises(errors.LeaseLost):
        await storage.job_background_accept(
            lease=Lease(job.id, "stale"),
            provider_job_id="p",
            provider_status=None,
            reconcile_in_s=1,
        )
    accepted = await storage.job_background_accept(
        lease=lease, provider_job_id="resp_1", provider_status="queued", reconcile_in_s=30,
        now=clock.now(),
    )  # fmt: skip
    assert accepted.state is JobState.RUNNING
    assert (accepted.provider_job_id, accepted.creation_outcome) == ("resp_1", "accepted")
    assert accepted.phase == "awaiting_provider"
    assert accepted.lease_token is None and accepted.lease_expires_at is None
    assert accepted.reconcile_at == clock.now() + timedelta(seconds=30)
    # Accepting changes no state: the log still ends with the claim.
    events = await storage.job_events(job_id=job.id)
    assert [e.to_state for e in events] == [JobState.QUEUED, JobState.RUNNING]
    # The old lease is gone: its holder can write nothing more, and the reaper never takes a
    # job whose lease is NULL.
    with pytest.raises(errors.LeaseLost):
        await storage.job_provider_submitting(lease=lease)
    clock.advance(10_000)
    reaped = await storage.job_reap_expired(limit=10, retry_delay=lambda _: 0, now=clock.now())
    assert reaped.total == 0


async def test_accept_is_due_at_once_after_an_early_event_or_a_cancel(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    outcome = await storage.provider_event_record(
        provider="sim", event_id="wh_1", event_type="response.completed",
        provider_job_id="resp_early", now=clock.now(),
    )  # fmt: skip
    assert not outcome.duplicate and outcome.job is None  # the job is not accepted yet
    early = await at_provider(storage, clock, tenant, pid="resp_early", in_s=600)
    assert early.reconcile_at == clock.now()

    job = await running(storage, clock, tenant)
    await storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api", now=clock.now())
    accepted = await storage.job_background_accept(
        lease=Lease(job.id, job.lease_token or ""), provider_job_id="resp_c",
        provider_status="queued", reconcile_in_s=600, now=clock.now(),
    )  # fmt: skip
    assert accepted.reconcile_at == clock.now()


async def test_claim_takes_due_jobs_once_and_leases_them(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    first = await at_provider(storage, clock, tenant, pid="p1", in_s=5)
    await at_provider(storage, clock, tenant, pid="p2", in_s=50)
    assert await storage.job_reconcile_claim(limit=10, lease_s=60, now=clock.now()) == []
    clock.advance(6)
    claimed = await storage.job_reconcile_claim(limit=10, lease_s=60, now=clock.now())
    assert [c.job.id for c in claimed] == [first.id]
    assert claimed[0].reconciled_at == clock.now() and claimed[0].reconcile_checks == 0
    # Leased: not due again until the lease passes.
    assert await storage.job_reconcile_claim(limit=10, lease_s=60, now=clock.now()) == []
    clock.advance(61)
    again = await storage.job_reconcile_claim(limit=10, lease_s=60, now=clock.now())
    assert sorted(c.job.provider_job_id or "" for c in again) == ["p1", "p2"]


async def test_concurrent_claims_never_share_a_job(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for index in range(6):
        await at_provider(storage, clock, tenant, pid=f"p{index}", in_s=1)
    clock.advance(2)
    batches = await asyncio.gather(
        *(storage.job_reconcile_claim(limit=2, lease_s=60, now=clock.now()) for _ in range(5))
    )
    ids = [item.job.id for batch in batches for item in batch]
    assert len(ids) == len(set(ids)) == 6


async def test_a_cancel_request_makes_the_job_due(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant, in_s=600)
    assert await storage.job_reconcile_claim(limit=5, lease_s=60, now=clock.now()) == []
    clock.advance(1)
    await storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api", now=clock.now())
    claimed = await storage.job_reconcile_claim(limit=5, lease_s=60, now=clock.now())
    assert [c.job.id for c in claimed] == [job.id]
    assert claimed[0].job.cancel_requested_at == clock.now()
    # Taken once for that request; the claim's lease governs after that.
    assert await storage.job_reconcile_claim(limit=5, lease_s=60, now=clock.now()) == []


async def test_defer_counts_failures_and_cancel_sent(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant, in_s=1)
    failure = {"kind": "status_check_failed", "code": "server_error", "message": "boom"}
    assert await storage.job_reconcile_defer(
        deferral=ReconcileDeferral(job.id, "resp_1", 5, failure=failure), now=clock.now()
    )
    clock.advance(5)
    (item,) = await storage.job_reconcile_claim(limit=1, lease_s=60, now=clock.now())
    assert (item.reconcile_failures, item.reconcile_error) == (1, failure)
    assert item.reconcile_checks == 1
    assert await storage.job_reconcile_defer(
        deferral=ReconcileDeferral(
            job.id, "resp_1", 5, provider_status="in_progress", cancel_sent=True
        ),
        now=clock.now(),
    )
    clock.advance(5)
    (item,) = await storage.job_reconcile_claim(limit=1, lease_s=60, now=clock.now())
    assert (item.reconcile_failures, item.reconcile_error) == (0, None)
    assert item.provider_status == "in_progress" and item.reconcile_checks == 2
    assert item.cancel_sent_at is not None
    # A wrong provider id (a stale view) writes nothing.
    assert not await storage.job_reconcile_defer(
        deferral=ReconcileDeferral(job.id, "resp_other", 5), now=clock.now()
    )


async def test_settle_is_fenced_and_billed_once(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant)
    usage = {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
    done = await storage.job_settle(
        settlement=settlement(job, result={"ok": 1}, usage=usage, provider_status="completed"),
        now=clock.now(),
    )
    assert done is not None and done.state is JobState.SUCCEEDED
    assert done.result == {"ok": 1} and done.usage == usage
    assert done.reconcile_at is None and done.phase is None and done.completed_at == clock.now()
    # A second verdict (a duplicate, a stale event, another reconciler) never applies.
    assert await storage.job_settle(settlement=settlement(job, JobState.FAILED)) is None
    entries = await storage.usage_for_job(job_id=job.id)
    assert [(e.kind, e.input_tokens, e.output_tokens) for e in entries] == [("completion", 7, 3)]
    events = await storage.job_events(job_id=job.id)
    assert [(e.to_state, e.actor, e.reason) for e in events][-1] == (
        JobState.SUCCEEDED, "reconciler", "completed"
    )  # fmt: skip


async def test_settle_to_queued_starts_a_new_attempt(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant)
    requeued = await storage.job_settle(
        settlement=settlement(
            job, JobState.QUEUED, reason="rate_limited", retry_in_s=30, count_attempt=False,
            error={"code": "rate_limit_exceeded", "message": "m", "type": "rate_limit_error"},
        ),
        now=clock.now(),
    )  # fmt: skip
    assert requeued is not None and requeued.state is JobState.QUEUED
    assert requeued.provider_job_id is None and requeued.creation_outcome is None
    assert requeued.attempt == 0 and requeued.run_at == clock.now() + timedelta(seconds=30)
    assert requeued.completed_at is None
    clock.advance(31)
    again = await storage.job_claim(worker_id="w2", limit=1, lease_ttl_s=60, now=clock.now())
    assert [j.id for j in again] == [job.id]


async def test_local_cancel_is_watched_then_discarded_and_refunded(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant, pid="resp_w")
    cancelled = await storage.job_settle(
        settlement=settlement(
            job, JobState.CANCELLED, reason="cancel_requested",
            cancel_outcome="not_supported", watch_in_s=10,
        ),
        now=clock.now(),
    )  # fmt: skip
    assert cancelled is not None and cancelled.state is JobState.CANCELLED
    assert cancelled.cancel_outcome == "not_supported"
    assert cancelled.reconcile_at == clock.now() + timedelta(seconds=10)
    # Still watched: an event about it makes it due; the claim hands it out.
    outcome = await storage.provider_event_record(
        provider="sim", event_id="wh_w", event_type="response.completed",
        provider_job_id="resp_w", now=clock.now(),
    )  # fmt: skip
    assert outcome.job is not None and outcome.job.id == job.id
    (item,) = await storage.job_reconcile_claim(limit=5, lease_s=60, now=clock.now())
    assert item.job.state is JobState.CANCELLED
    usage = {"input_tokens": 11, "output_tokens": 4}
    assert await storage.job_discard_late_result(
        job_id=job.id, provider_job_id="resp_w", to_state=JobState.SUCCEEDED, usage=usage,
        actor="reconciler", now=clock.now(),
    )  # fmt: skip
    assert not await storage.job_discard_late_result(
        job_id=job.id, provider_job_id="resp_w", to_state=JobState.SUCCEEDED, usage=usage,
        actor="reconciler", now=clock.now(),
    )  # fmt: skip
    final = await storage.job_get(job_id=job.id)
    assert final is not None and final.state is JobState.CANCELLED
    assert final.result is None and final.reconcile_at is None
    entries = sorted(
        (e.kind, e.input_tokens, e.output_tokens)
        for e in await storage.usage_for_job(job_id=job.id)
    )
    assert entries == [("completion", 11, 4), ("refund", 11, 4)]
    last = (await storage.job_events(job_id=job.id))[-1]
    assert (last.to_state, last.applied, last.reason) == (
        JobState.SUCCEEDED, False, "result_discarded_after_cancel"
    )  # fmt: skip
    clock.advance(100)
    assert await storage.job_reconcile_claim(limit=5, lease_s=60, now=clock.now()) == []


async def test_provider_events_are_recorded_once(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant, pid="resp_e", in_s=600)
    first = await storage.provider_event_record(
        provider="sim", event_id="wh_e", event_type="response.completed",
        provider_job_id="resp_e", now=clock.now(),
    )  # fmt: skip
    assert not first.duplicate and first.job is not None and first.job.id == job.id
    assert first.job.reconcile_at == clock.now()
    (item,) = await storage.job_reconcile_claim(limit=5, lease_s=60, now=clock.now())
    again = await storage.provider_event_record(
        provider="sim", event_id="wh_e", event_type="response.completed",
        provider_job_id="resp_e", now=clock.now(),
    )  # fmt: skip
    assert again.duplicate
    # A duplicate does not make the job due again (it is under the claim's lease).
    assert await storage.job_reconcile_claim(limit=5, lease_s=60, now=clock.now()) == []
    other = await storage.provider_event_record(
        provider="other", event_id="wh_e", event_type="response.completed",
        provider_job_id="resp_e", now=clock.now(),
    )  # fmt: skip
    assert not other.duplicate and other.job is None  # ids are per provider
    found = await storage.job_by_provider_job(provider="sim", provider_job_id="resp_e")
    assert found is not None and found.job.id == job.id
    assert await storage.provider_events_prune(before=clock.now() - timedelta(seconds=1)) == 0
    assert await storage.provider_events_prune(before=clock.now() + timedelta(seconds=1)) == 2
    assert item.job.id == job.id


async def test_refresh_makes_every_background_job_due(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    await at_provider(storage, clock, tenant, pid="a", in_s=600)
    await at_provider(storage, clock, tenant, pid="b", in_s=900)
    await running(storage, clock, tenant)  # under a worker's lease: not the reconciler's
    assert await storage.job_reconcile_refresh(now=clock.now()) == 2
    claimed = await storage.job_reconcile_claim(limit=10, lease_s=60, now=clock.now())
    assert sorted(c.job.provider_job_id or "" for c in claimed) == ["a", "b"]


async def test_refresh_and_claim_keep_to_the_providers_named(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    await at_provider(storage, clock, tenant, pid="s", in_s=600)
    await at_provider(storage, clock, tenant, pid="o", in_s=600, provider="other")
    assert await storage.job_reconcile_refresh(providers=[], now=clock.now()) == 0
    assert await storage.job_reconcile_refresh(providers=["other"], now=clock.now()) == 1
    claim = storage.job_reconcile_claim
    assert await claim(limit=10, lease_s=60, providers=["sim"], now=clock.now()) == []
    (item,) = await claim(limit=10, lease_s=60, providers=["sim", "other"], now=clock.now())
    assert (item.job.provider, item.job.provider_job_id) == ("other", "o")
