"""One rule for a retry after a cancel request, on both backends and through both writes that
can send a job back to the queue (a lease holder's finish, the reconciler's settle): storage
applies it in SQL (`retry_unless_cancelled`), and it must leave what `verdicts.as_applied` says."""

from __future__ import annotations

from typing import Literal

import pytest

from jobgate.domain import verdicts
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Settlement
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one

Q, S, F = JobState.QUEUED, JobState.SUCCEEDED, JobState.FAILED
VERDICTS = [(Q, "retryable_error"), (S, "completed"), (F, "fatal_error")]


async def _running(storage: Storage, clock: FakeClock, *, at_provider: bool) -> Job:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    [job] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    if not at_provider:
        return job
    assert job.lease_token is not None
    return await storage.job_background_accept(
        lease=Lease(job.id, job.lease_token),
        provider_job_id="resp_1",
        provider_status="in_progress",
        reconcile_in_s=30,
        now=clock.now(),
    )


@pytest.mark.parametrize("write", ["finish", "settle"])
@pytest.mark.parametrize("cancel_requested", [False, True], ids=["no_cancel", "cancel_requested"])
@pytest.mark.parametrize(("state", "reason"), VERDICTS, ids=[str(v[0]) for v in VERDICTS])
async def test_a_verdict_leaves_what_the_domain_rule_says(
    storage: Storage,
    clock: FakeClock,
    write: Literal["finish", "settle"],
    cancel_requested: bool,
    state: JobState,
    reason: str,
) -> None:
    job = await _running(storage, clock, at_provider=write == "settle")
    if cancel_requested:
        await storage.job_cancel(
            job_id=job.id, tenant_id=job.tenant_id, actor="api", now=clock.now()
        )
    clock.advance(1)
    if write == "finish":
        assert job.lease_token is not None
        await finish_one(
            storage,
            finish=Finish(lease=Lease(job.id, job.lease_token), state=state, reason=reason),
            now=clock.now(),
        )
    else:
        settled = await storage.job_settle(
            settlement=Settlement(
                job_id=job.id, provider_job_id="resp_1", state=state, reason=reason, actor="r"
            ),
            now=clock.now(),
        )
        assert settled is not None
    after = await storage.job_get(job_id=job.id)
    assert after is not None
    last = (await storage.job_events(job_id=job.id))[-1]
    expected = verdicts.as_applied(state, reason, None, cancel_requested=cancel_requested)
    assert (after.state, last.reason, after.cancel_outcome) == expected
    assert (after.completed_at is None) is (expected[0] is Q)
