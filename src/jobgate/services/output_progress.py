"""Progress of a streaming job while it runs: the output tokens streamed so far by
its current attempt, read from its durable output log (so any API process can answer), and
the fraction of the request's output cap they make (domain.progress.streamed)."""

from __future__ import annotations

import dataclasses

from jobgate.domain import progress
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.storage.protocol import OutputStreamStore


@dataclasses.dataclass(frozen=True, slots=True)
class Streamed:
    output_tokens: int
    fraction: float | None  # None: the request named no output cap


async def streamed_so_far(storage: OutputStreamStore, job: Job) -> Streamed | None:
    """The running streaming job's output so far; None for any other job."""
    if job.state is not JobState.RUNNING or not wants_stream(job):
        return None
    # Only the current attempt's output: a new attempt starts over (output.reset), or, when
    # it continues the partial output, repeats it first (its log is the whole answer so far).
    chars = await storage.job_output_chars(job_id=job.id, generation=job.run_count)
    tokens, fraction = progress.streamed(chars, progress.output_cap(job.request))
    return Streamed(tokens, fraction)


def wants_stream(job: Job) -> bool:
    """Whether the job asked for live output (`"stream": true` on submit, kept in its body)."""
    return isinstance(job.request, dict) and job.request.get("stream") is True
