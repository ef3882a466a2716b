"""The outbox fan-out of one statement that moves jobs of several tenants at once: only the
jobs with a target (an enabled endpoint of their tenant, or a webhook of their own) get rows,
and a statement that moves no job with a target writes none (PostgreSQL's trigger skips the
fan-out then, migration 0008)."""

from __future__ import annotations

from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.storage.webhook_helpers import make_endpoint


async def finish_all(storage: Storage, clock: FakeClock, count: int) -> list[str]:
    claimed = await storage.job_claim(worker_id="w", limit=count, lease_ttl_s=60, now=clock.now())
    assert len(claimed) == count
    results = await storage.job_finish_many(
        finishes=[
            Finish(
                lease=Lease(job.id, job.lease_token or ""),
                state=JobState.SUCCEEDED,
                reason="completed",
            )
            for job in claimed
        ],
        now=clock.now(),
    )
    return [done.job_id for done in results if done is not None]


async def test_one_batch_fans_out_only_to_jobs_with_targets(
    storage: Storage, clock: FakeClock
) -> None:
    hooked = await make_tenant(storage, "hooked")
    plain = await make_tenant(storage, "plain")
    endpoint = await make_endpoint(storage, hooked, clock)
    await make_endpoint(storage, plain, clock, disabled=True)  # a disabled one is no target
    jobs = {
        "endpoint": new_job(hooked),
        "own_url": new_job(plain, webhook={"url": "https://j.example/h"}),
        "nothing": new_job(plain),
    }
    for job in jobs.values():
        await submit_one(storage, job=job, now=clock.now())
    assert len(await finish_all(storage, clock, 3)) == 3
    rows = {
        name: [(r.event_type, r.target) for r in await storage.outbox_for_job(job_id=job.id)]
        for name, job in jobs.items()
    }
    assert rows == {
        "endpoint": [("job.succeeded", endpoint.id)],
        "own_url": [("job.succeeded", "job")],
        "nothing": [],
    }


async def test_a_batch_without_targets_writes_no_outbox_rows(
    storage: Storage, clock: FakeClock
) -> None:
    plain = await make_tenant(storage, "plain")
    other = await make_tenant(storage, "other")
    await make_endpoint(storage, other, clock)  # another tenant's endpoint is no target
    await make_endpoint(storage, plain, clock, disabled=True)
    jobs = [new_job(plain) for _ in range(3)]
    for job in jobs:
        await submit_one(storage, job=job, now=clock.now())
    assert len(await finish_all(storage, clock, 3)) == 3
    for job in jobs:
        assert await storage.outbox_for_job(job_id=job.id) == []
        events = await storage.job_events(job_id=job.id)
        assert [e.to_state for e in events] == [
            JobState.QUEUED,
            JobState.RUNNING,
            JobState.SUCCEEDED,
        ]
