"""What a job read adds to the stored view: `waiting` (services.waiting: why a queued job is not
claimed yet, or a background job has nobody to settle it; null when nothing holds it) with its
sentence as `note`; a queued job's `queue_position` (and whether it is exact), and
`phase: "rate_limited"` while a shared rate limit holds it; a running streaming job's output
tokens so far and, when its request capped its output, `progress` as their fraction of the
cap."""

from __future__ import annotations

from typing import Any

from jobgate.domain import waiting
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.domain.waiting import Waiting
from jobgate.http.context import AppContext
from jobgate.services import output_progress
from jobgate.storage.records import WaitRead


async def annotate(
    ctx: AppContext, job: Job, view: dict[str, Any], *, read: WaitRead | None = None
) -> dict[str, Any]:
    """`view` with what explains a wait (of a queued job, read here unless the caller read it
    with the job: Storage.job_status's `wait`)."""
    if job.state is JobState.QUEUED:
        if read is None:
            read = (await ctx.waits.reads([job])).get(job.id)
        if read is None:  # claimed since it was read: nothing holds it any more
            return _waiting(view, None)
        view["queue_position"] = read.queue_position
        view["queue_position_exact"] = read.queue_position_exact
        return _waiting(view, await ctx.waits.of_job(job, read=read))
    streamed = await output_progress.streamed_so_far(ctx.storage, job)
    if streamed is not None:
        view["output_tokens"] = streamed.output_tokens
        if streamed.fraction is not None:
            view["progress"] = streamed.fraction
    if job.state is not JobState.RUNNING:
        return _waiting(view, None)
    return _waiting(view, await ctx.waits.of_job(job))


async def annotate_page(
    ctx: AppContext, jobs: list[Job], views: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A page of one tenant's jobs (GET /v1/jobs) with `waiting` on each, the queued ones'
    read together."""
    found = await ctx.waits.of_queued(jobs)
    for job, view in zip(jobs, views, strict=True):
        if job.id in found:
            _waiting(view, found[job.id])
        elif job.state is JobState.RUNNING:
            _waiting(view, await ctx.waits.of_job(job))
        else:
            _waiting(view, None)  # a terminal job, or a queued one claimed since the page
    return views


def _waiting(view: dict[str, Any], found: Waiting | None) -> dict[str, Any]:
    view["waiting"] = None if found is None else found.view()
    if found is not None and found.reason != waiting.QUEUE:
        view["note"] = found.detail
        if found.reason == waiting.RATE_LIMITED:
            view["phase"] = "rate_limited"
    return view
