"""Live output streaming, native surface: `GET /v1/jobs/{id}/stream` serves a job's output
deltas (server-sent events) as its worker appends them, from any API process, resumable with
`Last-Event-ID` or `?starting_after=N`, then one terminal event. Every reader of a job in this
process shares its feed (services.live_feeds). A client that leaves frees its place at once
(the response's task is cancelled with it)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query
from starlette.responses import Response, StreamingResponse

from jobgate import metrics
from jobgate.http import live_streams
from jobgate.http.context import Ctx
from jobgate.http.job_access import JobStreamer
from jobgate.http.object_ids import JobId
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.views import job_view
from jobgate.services import output_feed

router = APIRouter(prefix="/v1", tags=["jobs"])
MAX_SEQ = 2**31 - 1

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "`output.delta` events `{seq, text}` (id: seq), an `output.reset` event "
        "`{seq, generation}` before the first delta of a new attempt, then one terminal event "
        "(`job.succeeded`, `job.failed`, `job.cancelled`, `job.expired`) with the job",
        "content": {"text/event-stream": {}},
    },
    **{
        status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
        for status in (400, 401, 404, 422, 429, 503)
    },
}


@router.get(
    "/jobs/{job_id}/stream",
    responses=_RESPONSES,
    response_class=StreamingResponse,
    summary="Stream a job's output live",
    description="Server-sent events of the job's output as it is produced (for a job submitted "
    'with `"stream": true`; any other job gives its whole text as one delta when it finishes), '
    "then the terminal event. Served for finished jobs too. Resume with `Last-Event-ID` or "
    "`?starting_after=N` (the last `seq` received). A tenant's live streams are bounded per API "
    "process (`JOBGATE_STREAM_READERS_PER_TENANT`): one more answers 429. With the tenant's API "
    "key, or a job token of this job with scope `stream`.",
)
async def stream_job_output(
    job_id: JobId,
    ctx: Ctx,
    caller: JobStreamer,
    starting_after: Annotated[
        int, Query(ge=0, le=MAX_SEQ, description="Send the deltas after this seq")
    ] = 0,
    last_event_id: Annotated[
        str,
        Header(
            alias="Last-Event-ID",
            pattern=r"^[0-9]{0,18}$",
            description="Resume after this seq (SSE reconnection)",
        ),
    ] = "",
) -> Response:
    after = starting_after
    if last_event_id:
        after = max(after, min(int(last_event_id), MAX_SEQ))
    with live_streams.admitted(ctx.feeds, caller.tenant_id) as slot:  # 429 beyond the bound
        # 404 before the stream starts
        caller.admit(await ctx.jobs.view(tenant_id=caller.tenant_id, job_id=job_id))
        feed = output_feed.job_output(
            ctx.jobs, ctx.feeds, tenant_id=caller.tenant_id, job_id=job_id, after=after
        )
        return live_streams.sse(_frames(feed), slot)


async def _frames(feed: AsyncGenerator[output_feed.FeedEvent, None]) -> AsyncIterator[bytes]:
    metrics.OUTPUT_STREAMS_OPEN.inc()
    try:
        async for event in feed:
            yield frame(event)
    finally:
        metrics.OUTPUT_STREAMS_OPEN.dec()
        await feed.aclose()


def frame(event: output_feed.FeedEvent) -> bytes:
    if event is output_feed.KEEPALIVE:
        return b": keep-alive\n\n"
    data = job_view(event.job) if event.job is not None else event.data
    head = b"" if event.event_id is None else b"id: %d\n" % event.event_id
    return head + b"event: %s\ndata: %s\n\n" % (event.event.encode(), orjson.dumps(data))
