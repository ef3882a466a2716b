"""Retention: finished jobs past the horizon are deleted with their events, outbox
rows, delivery attempts and usage rows (the usage summed per tenant and day first), on both
backends, and nothing else is; also while a worker runs."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from jobgate.domain.job import Job, Lease
from jobgate.domain.retention import Horizon
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.process.runtime import Runtime
from jobgate.roles.reaper import Reaper
from jobgate.roles.retention import Retention
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.protocol import Storage
from jobgate.storage.records import DeliveryOutcome, IdempotencyClaim, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one
from tests.storage.webhook_helpers import make_endpoint

pytestmark = pytest.mark.asyncio

DAY = timedelta(days=1)
DELIVERED = DeliveryOutcome(state="succeeded", attempted=True, status_code=200, latency_ms=3)
USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_read_input_tokens": 6,
    "cache_creation_input_tokens": 2,
}


async def finished(
    storage: Storage,
    tenant: Tenant,
    at: datetime,
    *,
    state: JobState = JobState.SUCCEEDED,
    usage: dict[str, int] | None = None,
    dead_lettered: bool = False,
    key_ttl_s: float | None = None,
    **fields: Any,
) -> Job:
    """A job submitted (with an Idempotency-Key living `key_ttl_s`), claimed and finished in
    `state` at `at` (its outbox rows pending)."""
    key = None
    if key_ttl_s is not None:
        key = IdempotencyClaim("POST /v1/jobs", f"k-{at.timestamp()}", "h", 202, key_ttl_s)
    job = (await submit_one(storage, job=new_job(tenant, **fields), idempotency=key, now=at)).job
    [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=at)
    assert claimed.id == job.id
    return await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job.id, claimed.lease_token or ""),
            state=state,
            reason="test",
            result={"ok": True} if state is JobState.SUCCEEDED else None,
            usage=usage,
            dead_lettered=dead_lettered,
        ),
        now=at + timedelta(seconds=1),
    )


async def deliver_all(storage: Storage, at: datetime) -> None:
    """Deliver every pending outbox row (one attempt each)."""
    while deliveries := await storage.delivery_claim_due(limit=100, lease_s=30, now=at):
        for delivery in deliveries:
            assert await storage.delivery_record(delivery=delivery, outcome=DELIVERED, now=at)


async def rows_of(storage: Storage, job_id: str) -> dict[str, int]:
    return {
        "job": int(await storage.job_get(job_id=job_id) is not None),
        "events": len(await storage.job_events(job_id=job_id)),
        "outbox": len(await storage.outbox_for_job(job_id=job_id)),
        "attempts": len(await storage.delivery_attempts_for_job(job_id=job_id)),
        "usage": len(await storage.usage_for_job(job_id=job_id)),
    }


def deleted_rows(table: str) -> float:
    return REGISTRY.get_sample_value("jobgate_retention_deleted_rows_total", {"table": table}) or 0


async def test_deletes_exactly_the_finished_jobs_past_the_horizon(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    await make_endpoint(storage, acme, clock)
    now = clock.now()
    old = now - 10 * DAY
    gone_ok = await finished(storage, acme, old, usage=USAGE)
    gone_failed = await finished(storage, beta, old, state=JobState.FAILED, dead_lettered=True)
    gone_cancelled = (await submit_one(storage, job=new_job(acme), now=old)).job
    await storage.job_cancel(job_id=gone_cancelled.id, tenant_id=acme.id, actor="api", now=old)
    await deliver_all(storage, old + timedelta(seconds=5))
    recent = await finished(storage, acme, now - 2 * DAY, usage=USAGE)
    await deliver_all(storage, now - 2 * DAY + timedelta(seconds=5))
    pending_delivery = await finished(storage, acme, old)  # its delivery is still pending
    # A key that lives nine days (a long batch window, say): live until a day from now.
    live_key = await finished(storage, beta, now - 8 * DAY, key_ttl_s=9 * 86_400)
    still_queued = (await submit_one(storage, job=new_job(acme), now=old)).job
    assert gone_ok.state is JobState.SUCCEEDED

    before = {j.id: await rows_of(storage, j.id) for j in (gone_ok, gone_failed, gone_cancelled)}
    assert before[gone_ok.id] == {"job": 1, "events": 3, "outbox": 1, "attempts": 1, "usage": 1}

    cut = Horizon(now=now, completed_before=now - 7 * DAY)

    first = await storage.retention_delete(horizon=cut, limit=2)
    second = await storage.retention_delete(horizon=cut, limit=2)
    third = await storage.retention_delete(horizon=cut, limit=2)
    assert (first.jobs, second.jobs, third.jobs) == (2, 1, 0)  # small batches; then nothing
    total = {t: first.by_table()[t] + second.by_table()[t] for t in first.by_table()}
    assert total == {
        "jobs": 3,
        "job_events": 3 + 3 + 2,  # queued, running, final; queued, cancelled
        "outbox": 1 + 1,  # the endpoint's job.succeeded and job.cancelled (failed: beta's)
        "webhook_attempts": 2,
        "usage_ledger": 1,
    }
    for job in (gone_ok, gone_failed, gone_cancelled):
        assert await rows_of(storage, job.id) == dict.fromkeys(
            ("job", "events", "outbox", "attempts", "usage"), 0
        )
    for job in (pending_delivery, recent, live_key, still_queued):
        assert (await rows_of(storage, job.id))["job"] == 1, job.id
        assert len(await storage.job_events(job_id=job.id)) >= 1
    [day] = await storage.usage_daily()
    assert (day.tenant_id, day.day, day.provider, day.model) == (
        acme.id,
        (old + timedelta(seconds=1)).date(),
        "sim",
        "sim-echo",
    )
    assert (day.jobs, day.input_tokens, day.output_tokens) == (1, 10, 5)
    assert (day.cache_read_tokens, day.cache_write_tokens) == (6, 2)  # priced apart
    assert await storage.usage_daily(tenant_id=beta.id) == []


async def test_retention_while_a_worker_runs(
    runtime: Runtime, storage: Storage, clock: FakeClock
) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    now = clock.now()
    old = [
        await finished(storage, acme, now - 10 * DAY + timedelta(seconds=i), usage=USAGE)
        for i in range(12)
    ]
    fresh = [
        (
            await runtime.jobs.submit(
                tenant_id=acme.id,
                spec=SubmitSpec(
                    endpoint="/v1/chat/completions",
                    body={"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
                ),
            )
        ).job.id
        for _ in range(20)
    ]
    worker = runtime.worker(concurrency=4)
    retention = Retention(storage=storage, settings=runtime.settings, batch_size=3, max_batches=1)
    jobs_deleted_before = deleted_rows("jobs")

    async def work() -> int:
        ran = 0
        while done := await worker.run_once():
            ran += len(done)
        return ran

    async def sweep() -> int:
        deleted = 0
        for _ in range(6):  # one batch of 3 per pass, interleaved with the worker's claims
            deleted += (await retention.sweep_once(now=now))["jobs"]
            await asyncio.sleep(0)
        return deleted

    ran, deleted = await asyncio.gather(work(), sweep())
    assert (ran, deleted) == (20, 12)
    assert deleted_rows("jobs") - jobs_deleted_before == 12
    for job in old:
        assert await rows_of(storage, job.id) == dict.fromkeys(
            ("job", "events", "outbox", "attempts", "usage"), 0
        )
    for job_id in fresh:
        kept = await storage.job_get(job_id=job_id)
        assert kept is not None and kept.state is JobState.SUCCEEDED
        events = await storage.job_events(job_id=job_id)
        assert [str(e.to_state) for e in events] == ["queued", "running", "succeeded"]
    [day] = await storage.usage_daily(tenant_id=acme.id)
    assert (day.jobs, day.input_tokens, day.output_tokens) == (12, 120, 60)
    assert (day.cache_read_tokens, day.cache_write_tokens) == (72, 24)


async def test_the_reaper_pass_deletes_past_retention(
    runtime: Runtime, storage: Storage, clock: FakeClock
) -> None:
    acme = (await runtime.tenants.create("acme")).tenant
    now = clock.now()
    gone = await finished(storage, acme, now - 8 * DAY)
    kept = await finished(storage, acme, now - 6 * DAY)
    reaper = Reaper(storage=storage, settings=runtime.settings)
    assert (await reaper.reap_once(now=now)).deleted == 1
    assert await storage.job_get(job_id=gone.id) is None
    assert await storage.job_get(job_id=kept.id) is not None
    assert (await reaper.reap_once(now=now)).deleted == 0
