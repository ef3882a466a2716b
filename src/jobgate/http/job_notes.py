"""Notes on a job that explain a wait: a background-mode job whose reconciler is not running
says so, instead of looking `running` forever."""

from __future__ import annotations

from typing import Any

from jobgate.domain.job import Job, Phase
from jobgate.domain.states import JobState
from jobgate.http.context import AppContext
from jobgate.services import presence


async def annotate(ctx: AppContext, job: Job, view: dict[str, Any]) -> dict[str, Any]:
    """`view` with a `note` member when the job waits on a reconciler that is not there."""
    if job.state is not JobState.RUNNING or job.phase != Phase.AWAITING_PROVIDER:
        return view
    missing = await presence.reconciler_missing(ctx.storage, ctx.settings)
    if missing is not None:
        view["note"] = f"waiting for a reconciler: {missing}"
    return view
