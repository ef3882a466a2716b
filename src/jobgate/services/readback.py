"""Resolving a write whose reply was lost: the commit may have happened, so the job is read
back instead of assuming the write failed (a retry refused by the lease fence proves nothing:
our own first attempt may be what moved the job)."""

from __future__ import annotations

from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.storage import protocol
from jobgate.storage.records import Finished

_EVENTS_AFTER_CLAIM = 100


async def verdict_written(
    storage: protocol.JobReadStore, claimed: Job, *, actor: str
) -> Finished | None:
    """The verdict `actor` wrote for the lease it claimed `claimed` with, or None if someone
    else (the reaper) moved the job out of that run. The first applied event after the claim's
    that leaves `running` ends the run: only its author's write was applied."""
    events = await storage.job_events(
        job_id=claimed.id, after_seq=claimed.event_seq, limit=_EVENTS_AFTER_CLAIM
    )
    for event in events:
        if not event.applied or event.to_state is JobState.RUNNING:
            continue  # an ignored event, or a cancel request while it runs
        if event.from_state is not JobState.RUNNING or event.actor != actor:
            return None
        job = await storage.job_get(job_id=claimed.id)
        attempt = claimed.attempt if job is None else job.attempt
        return Finished(claimed.id, event.to_state, attempt)
    return None


async def accepted(
    storage: protocol.JobReadStore, job_id: str, *, provider_job_id: str
) -> Job | None:
    """The job as written by a background accept of `provider_job_id`, or None if that accept
    was not applied (the job holds another provider job, or none)."""
    job = await storage.job_get(job_id=job_id)
    if job is None or job.provider_job_id != provider_job_id:
        return None
    return job
