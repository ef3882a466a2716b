"""Notes on a job that explain a wait: a background-mode job whose reconciler is not running
says so, instead of looking `running` forever; a queued job held back by a shared rate limit
shows `phase: "rate_limited"`; a running streaming job shows the output tokens streamed so far
and, when its request capped its output, `progress` as their fraction of the cap."""

from __future__ import annotations

from typing import Any

from jobgate.domain.job import Job, Phase
from jobgate.domain.states import JobState
from jobgate.http.context import AppContext
from jobgate.services import output_progress, presence, rate_limits


async def annotate(
    ctx: AppContext, job: Job, view: dict[str, Any], *, queue_position: int | None = None
) -> dict[str, Any]:
    """`view` with a `note` member when the job waits on a reconciler that is not there; for a
    queued job its `queue_position` (read here unless the caller read it with the job:
    Storage.job_status), and `phase: "rate_limited"` when it waits for a shared rate limit."""
    if job.state is JobState.QUEUED:
        return await _queued(ctx, job, view, queue_position)
    streamed = await output_progress.streamed_so_far(ctx.storage, job)
    if streamed is not None:
        view["output_tokens"] = streamed.output_tokens
        if streamed.fraction is not None:
            view["progress"] = streamed.fraction
    if job.state is not JobState.RUNNING or job.phase != Phase.AWAITING_PROVIDER:
        return view
    missing = await presence.reconciler_missing(ctx.storage, ctx.settings)
    if missing is not None:
        view["note"] = f"waiting for a reconciler: {missing}"
    return view


async def _queued(
    ctx: AppContext, job: Job, view: dict[str, Any], position: int | None
) -> dict[str, Any]:
    """A queued job's place in its tenant's line, and the rate limit it waits for, if any."""
    if position is None:
        position = await ctx.storage.job_queue_position(job=job)
    view["queue_position"] = position
    try:
        config = ctx.jobs.providers.config(job.provider)
    except KeyError:
        return view
    wait_s = await rate_limits.wait_of(ctx.storage, job.provider, config, job.model)
    if wait_s > 0:
        view["phase"] = "rate_limited"
        view["note"] = f"waiting for the shared rate limit of {job.provider} (~{wait_s:.0f} s)"
    return view
