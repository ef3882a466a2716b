"""Live output streaming, reader side (native API): a job's output deltas from its durable
output log as they are appended, then one terminal event, from any API process.

A reader follows the job's feed (services.live_feeds: one per job and process, shared by every
reader of it) and sends only what comes after the client's last sequence number. The feed reads
the job before the chunks (the worker writes every chunk before the verdict), so a terminal
snapshot's chunks are complete. A chunk of a new generation (a reclaimed or retried attempt) is
announced by a reset event first: the text so far is void, but for its first `continued_chars`
characters when the new attempt continues it (`"on_retry": "continue"`: its log repeats them
first, so a client that keeps them skips as many of the deltas). So is a finished job whose
last attempt wrote no chunk (its answer was empty): the reset comes before the terminal event,
with the answer's text if any. A finished job whose log is empty (a job that did not ask for
live output, or whose log was dropped) yields its whole text as one delta. A stream the server
cannot carry on (storage failing for this reader, a feed's defect) ends after a whole event:
the client resumes with Last-Event-ID.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator
from typing import Any

from jobgate import errors
from jobgate.domain import events as domain_events
from jobgate.domain.job import Job
from jobgate.services import live_feeds
from jobgate.services.jobs import JobService
from jobgate.storage.records import OutputChunk
from jobgate.wire.content import output_text

log = logging.getLogger(__name__)

KEEPALIVE_S = 15.0
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
    jobs: JobService, feeds: live_feeds.LiveFeeds, *, tenant_id: str, job_id: str, after: int
) -> AsyncGenerator[FeedEvent, None]:
    """The deltas after sequence number `after`, then the terminal event; KEEPALIVE when
    nothing happened for a while. Ends early (a resumable cut) if the job is deleted or the
    stream cannot be carried on."""
    try:
        async with feeds.follow(
            tenant_id=tenant_id, job_id=job_id, kind="output", start=after
        ) as feed:
            async for event in _follow(jobs, feed, after):
                yield event
    except (errors.NotFound, live_feeds.FeedEnded):
        return  # deleted meanwhile, or the feed failed (logged): the client may resume
    except errors.StorageError as exc:
        log.warning(
            "a live stream was cut; the client resumes: %s",
            type(exc).__name__,
            extra={"job_id": job_id},
        )


async def _follow(
    jobs: JobService, feed: live_feeds.JobFeed, after: int
) -> AsyncGenerator[FeedEvent, None]:
    last = after
    generation = await _generation_at(jobs, feed.job_id, after)
    seen = 0
    while True:
        snapshot = await feed.next(seen, KEEPALIVE_S)
        if snapshot is None:
            yield KEEPALIVE
            continue
        seen = snapshot.version
        async for chunks in feed.chunks_after(snapshot, last):
            for chunk in chunks:
                if generation is not None and chunk.generation != generation:
                    yield FeedEvent(RESET, _reset_of(chunk))
                generation = chunk.generation
                last = chunk.seq
                yield FeedEvent(DELTA, {"seq": chunk.seq, "text": chunk.text}, chunk.seq)
        job = snapshot.job
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


def _reset_of(chunk: OutputChunk) -> dict[str, Any]:
    """The reset before `chunk`, the first of a new generation; `continued_chars` when that
    generation goes on from the previous one's text (continue on retry)."""
    data: dict[str, Any] = {"seq": chunk.seq, "generation": chunk.generation}
    if chunk.continued_chars:
        data["continued_chars"] = chunk.continued_chars
    return data


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
