"""`jobgate why JOB`: one paragraph saying why a job is where it is, from its `waiting` member
(the server's claim rules: a schedule, a pause, no live worker, a budget, a breaker, a rate
limit, a cap, its turn) and what would move it."""

from __future__ import annotations

import click

from jobgate import clock
from jobgate.cli import client_connection as connection
from jobgate.cli import client_output as out
from jobgate.client import Job, JobWaiting

# What moves a job held for each reason (after the server's own sentence).
_REMEDY: dict[str, str] = {
    "scheduled": "It is not claimed before then.",
    "paused": "`jobgate pauses` lists the pauses; `jobgate resume ID` lifts one (an operator key).",
    "no_worker": "Start the missing process; nothing is lost meanwhile.",
    "budget_exhausted": "It is claimed when the budget resets, or sooner if an operator raises "
    "it (`jobgate tenants set NAME --daily-token-budget N`, or the budget the sentence names, "
    "e.g. --daily-token-budget-per-key N).",
    "breaker_open": "jobgate sends the provider one probe call when the breaker half-opens and "
    "resumes claims once a call succeeds; check the provider's status meanwhile.",
    "rate_limited": "It is claimed as soon as the shared rate limit (its provider's, or its "
    "concurrency key's rpm_per_key) admits it.",
    "tenant_cap": "It starts when one of its tenant's running jobs finishes (or an operator "
    "raises the cap: `jobgate tenants set NAME --max-running N`).",
    "key_cap": "It starts when a running job of the same concurrency key finishes.",
    "queue": "Nothing holds it back: it starts as workers free slots.",
}


def explain(job: Job, now_s: float) -> str:
    """The paragraph for `job` as read at `now_s` (Unix seconds)."""
    head = f"Job {job.id} is {job.status}"
    waiting = job.waiting
    if job.terminal:
        when = out.timestamp(job.completed_at) if job.completed_at else "earlier"
        cause = f" ({job.error.code}: {job.error.message})" if job.error is not None else ""
        return f"{head}{cause} since {when}: it waits for nothing."
    if job.status == "running":
        if waiting is not None:
            return f"{head}, but {waiting.detail}. {_REMEDY[waiting.reason]}"
        phase = f" ({job.phase})" if job.phase else ""
        return (
            f"{head}{phase}, attempt {job.attempt} of {job.max_attempts}: a worker holds it and "
            "nothing holds it back."
        )
    if waiting is None:
        return f"{head} and first in its tenant's line: a worker may claim it now."
    return f"{head}, not claimed yet: {_sentence(waiting, now_s)} {_REMEDY[waiting.reason]}"


def _sentence(waiting: JobWaiting, now_s: float) -> str:
    detail = waiting.detail.rstrip(".")
    if waiting.until is None:
        return f"{detail}."
    left = max(0.0, waiting.until - now_s)
    return f"{detail} (until {out.timestamp(waiting.until)}, in {out.duration(left)})."


@click.command()
@click.argument("job_id")
@connection.connection_options
def why(job_id: str, url: str, api_key: str | None, as_json: bool) -> None:
    """Say why a job waits (or that nothing holds it), and what would move it."""
    with connection.connect(url, api_key, as_json) as client:
        job = client.get(job_id)
    if as_json:
        waiting = job.raw.get("waiting")
        out.print_json({"id": job.id, "status": job.status, "waiting": waiting})
        return
    click.echo(explain(job, clock.SystemClock().now().timestamp()))


COMMANDS = (why,)
