"""A job's provider generation: how many of its provider jobs ended and were followed by a
new attempt. Creates carry the job id as Idempotency-Key, suffixed by the generation, so that a
provider which deduplicates creates answers a re-sent create with the original (same
generation) but runs a genuinely new attempt anew (next generation). On both stores."""

from __future__ import annotations

import pytest

from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant
from tests.storage.test_providers_contract import at_provider, running, settlement

pytestmark = pytest.mark.asyncio


async def test_a_new_attempt_after_the_provider_job_ended_is_a_new_generation(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant, pid="resp_1")
    assert job.provider_generation == 0
    retried = await storage.job_settle(
        settlement=settlement(job, JobState.QUEUED, reason="retryable_error"), now=clock.now()
    )
    assert retried is not None and retried.state is JobState.QUEUED
    assert retried.provider_job_id is None and retried.provider_generation == 1
    # A rate limit at the provider ended that provider job too.
    [again] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    assert again.provider_generation == 1
    lease = Lease(again.id, again.lease_token or "")
    await storage.job_provider_submitting(lease=lease, now=clock.now())
    second = await storage.job_background_accept(
        lease=lease, provider_job_id="resp_2", provider_status="queued", reconcile_in_s=30,
        now=clock.now(),
    )  # fmt: skip
    limited = await storage.job_settle(
        settlement=settlement(second, JobState.QUEUED, reason="rate_limited", count_attempt=False),
        now=clock.now(),
    )
    assert limited is not None and limited.provider_generation == 2


async def test_a_verdict_or_a_worker_retry_keeps_the_generation(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant, pid="resp_1")
    done = await storage.job_settle(settlement=settlement(job), now=clock.now())
    assert done is not None and done.provider_generation == 0
    # A worker's retry (a failed or unknown create, a lost lease): the provider job, if any,
    # may exist; re-sending under the same key is what lets the provider deduplicate it.
    sync = await running(storage, clock, tenant)
    requeued = await finish_one(
        storage,
        finish=Finish(
            lease=Lease(sync.id, sync.lease_token or ""),
            state=JobState.QUEUED,
            reason="retryable_error",
            creation_outcome="unknown",
        ),
        now=clock.now(),
    )
    assert requeued is not None and requeued.provider_generation == 0


async def test_a_redrive_after_the_provider_ended_the_job_is_a_new_generation(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    job = await at_provider(storage, clock, tenant, pid="resp_1")
    failed = await storage.job_settle(
        settlement=settlement(
            job, JobState.FAILED, reason="attempts_exhausted", dead_lettered=True
        ),
        now=clock.now(),
    )
    assert failed is not None and failed.provider_generation == 0
    redriven = await storage.job_redrive(
        job_id=job.id, tenant_id=tenant.id, actor="operator", now=clock.now()
    )
    assert redriven is not None and redriven.state is JobState.QUEUED
    assert redriven.provider_generation == 1


async def test_a_redrive_of_a_job_no_provider_accepted_keeps_the_generation(
    storage: Storage, clock: FakeClock
) -> None:
    # E.g. its create's outcome was unknown: the provider may hold it, under the same key.
    tenant = await make_tenant(storage)
    sync = await running(storage, clock, tenant)
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(sync.id, sync.lease_token or ""),
            state=JobState.FAILED,
            reason="creation_outcome_unknown",
            creation_outcome="unknown",
            dead_lettered=True,
        ),
        now=clock.now(),
    )
    again = await storage.job_redrive(
        job_id=sync.id, tenant_id=tenant.id, actor="operator", now=clock.now()
    )
    assert again is not None and again.provider_generation == 0
