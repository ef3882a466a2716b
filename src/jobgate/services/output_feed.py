"""Live output streaming, reader side (native API): a job's output deltas from its durable
output log as they are appended, then one terminal event, from any API process.

A reader registers for wake-ups before it reads, reads the job before the chunks (the worker
writes every chunk before the verdict, so a terminal job read first means the chunks read
after it are complete), and sends only what comes after the client's last sequence number.
A chunk of a new generation (a reclaimed or retried attempt) is announced by a reset event
first: the text so far is void. So is a finished job whose last attempt wrote no chunk (its
answer was empty): the reset comes before the terminal event, with the answer's text if any.
A finished job whose log is empty (a job that did not ask for live output, or whose log was
dropped) yields its whole text as one delta.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from typing import Any

from jobgate import errors
from jobgate.domain import events as domain_events
from jobgate.domain.job import Job
from jobgate.providers.streaming import output_text
from jobgate.services.jobs import JobService
from jobgate.wakeups import wait_for

KEEPALIVE_S = 15.0
PAGE = 1000
DELTA = "output.delta"
RESET = "output.reset"


@dataclasses.dataclass(frozen=True, slots=True)
class FeedEvent:
    """One server-sent event; `event_id` None leaves the client's Last-Event-ID as it was.
    The terminal event carries the finished `job` (the edge renders its public view)."""

    event: str
    data: dict[str, Any]
    event_id: int | None = None
    job: Job | None = None


KEEPALIVE = FeedEvent("", {})


async def job_output(
    jobs: JobService, *, tenant_id: str, job_id: str, after: int
) -> AsyncGenerator[FeedEvent, None]:
    """The deltas after sequence number `after`, then the terminal event; KEEPALIVE when
    nothing happened for a while. Raises errors.NotFound before the first event."""
    storage = jobs.storage
    with storage.changes.watch_stream(job_id) as watch:
        job = await jobs.view(tenant_id=tenant_id, job_id=job_id)
        last = after
        generation = await _generation_at(jobs, job_id, after)
        while True:
            while job.purged_at is None:  # a purge drops the output with the result
                chunks = await storage.job_output_read(job_id=job_id, after_seq=last, limit=PAGE)
                for chunk in chunks:
                    if generation is not None and chunk.generation != generation:
                        yield FeedEvent(RESET, {"seq": chunk.seq, "generation": chunk.generation})
                    generation = chunk.generation
                    last = chunk.seq
                    yield FeedEvent(DELTA, {"seq": chunk.seq, "text": chunk.text}, chunk.seq)
                if len(chunks) < PAGE:
                    break
            if job.terminal:  # read before the chunks: they are all there
                if last == 0 and generation is None:
                    text = output_text(job.result)
                    if text:
                        yield FeedEvent(DELTA, {"seq": 1, "text": text}, 1)
                elif generation is not None and generation != job.run_count:
                    # The last attempt wrote nothing (an empty answer, or it never streamed):
                    # the text so far is a void attempt's and must not stand as the answer.
                    yield FeedEvent(RESET, {"seq": last + 1, "generation": job.run_count})
                    text = output_text(job.result)
                    if text:
                        yield FeedEvent(DELTA, {"seq": last + 1, "text": text})
                yield terminal_event(job)
                return
            moved = True  # after a silence, read everything again (a signal may be lost)
            if await wait_for(watch.changed, KEEPALIVE_S):
                moved, _ = watch.take()
            else:
                watch.take()
                yield KEEPALIVE
            if moved:  # an append alone costs one read: the chunks
                try:
                    job = await jobs.view(tenant_id=tenant_id, job_id=job_id)
                except errors.NotFound:
                    return  # deleted meanwhile


def terminal_event(job: Job) -> FeedEvent:
    """`job.succeeded`, `job.failed`, `job.cancelled` or `job.expired`, with the job."""
    name = domain_events.event_type_for("jobs", job.state) or f"job.{job.state}"
    return FeedEvent(name, {}, job=job)


async def _generation_at(jobs: JobService, job_id: str, seq: int) -> int | None:
    """The generation of the chunk the client saw last (None before the first)."""
    if seq <= 0:
        return None
    chunks = await jobs.storage.job_output_read(job_id=job_id, after_seq=seq - 1, limit=1)
    return chunks[0].generation if chunks and chunks[0].seq == seq else None
