"""OpenAI-compatible /v1/responses: create (background, synchronous or streamed), retrieve
(with `?wait=N` long polls and `?stream=true&starting_after=N` event replays), cancel, delete.
Point the official `openai` SDK's `base_url` at jobgate and every provider behind it gains
background mode, cancellation and signed webhooks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, Query, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive

from jobgate.domain import ranges, response_requests, responses
from jobgate.domain.job import Job
from jobgate.http import live_streams
from jobgate.http.context import AppContext, Ctx, CurrentTenant
from jobgate.http.json_response import json_response
from jobgate.http.models import ProblemOut
from jobgate.http.object_ids import ResponseId
from jobgate.http.responses_models import CreateResponseRequest, DeletedResponseOut, ResponseOut
from jobgate.http.strict_json import StrictJsonRoute
from jobgate.services.live_feeds import ReaderSlot
from jobgate.services.responses import ResponsesService
from jobgate.storage.records import SubmitOutcome, Tenant

router = APIRouter(prefix="/v1", tags=["responses"], route_class=StrictJsonRoute)

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 409, 413, 422, 429, 503)
}
_STREAMS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The Response object, or with `stream` its `response.*` events",
        "content": {"text/event-stream": {}},
    },
    **_PROBLEMS,
}


def service(ctx: Ctx) -> ResponsesService:
    return ResponsesService(ctx.jobs, ctx.feeds)


Service = Annotated[ResponsesService, Depends(service)]


class EventStream(StreamingResponse):
    """Server-sent events that remember whether the client went away (as opposed to the
    server shutting down, which cancels the stream too)."""

    client_gone = False

    async def listen_for_disconnect(self, receive: Receive) -> None:
        await super().listen_for_disconnect(receive)
        self.client_gone = True


def _headers(svc: ResponsesService, job: Job) -> dict[str, str]:
    if job.terminal:
        return {}
    return {"Retry-After": str(svc.jobs.retry_after_s(job))}


def _sse(event: dict[str, Any]) -> bytes:
    if not event:
        return b": keep-alive\n\n"
    data = orjson.dumps(event)
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (
        event["sequence_number"],
        event["type"].encode(),
        data,
    )


def _stream(
    svc: ResponsesService,
    slot: ReaderSlot,
    tenant_id: str,
    response_id: str,
    after: int,
    *,
    cancel_if_gone: bool,
) -> EventStream:
    finished = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal finished
        try:
            async for event in svc.events(
                tenant_id=tenant_id, response_id=response_id, after=after
            ):
                yield _sse(event)
            finished = True
        finally:
            if cancel_if_gone and not finished and answer.client_gone:
                await svc.cancel_abandoned(tenant_id=tenant_id, response_id=response_id)

    answer = EventStream(body(), media_type="text/event-stream", headers=live_streams.SSE_HEADERS)
    return live_streams.holding(answer, slot)


@router.post(
    "/responses",
    response_model=ResponseOut,
    responses=_STREAMS,
    summary="Create a response",
    description="`background: true` answers the `queued` Response at once (200, `Location`, "
    "`Retry-After`); otherwise the request waits for the finished Response, and a client that "
    "disconnects cancels it. `stream: true` answers with the `response.*` events. Honours "
    "`Idempotency-Key` like POST /v1/jobs.",
)
async def create_response(
    payload: CreateResponseRequest,
    request: Request,
    svc: Service,
    tenant: CurrentTenant,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> Response:
    raw = await request.json()  # the one strict parse (http.strict_json), cached
    return await create(request, svc, tenant, raw, idempotency_key)


async def create(
    request: Request,
    svc: ResponsesService,
    tenant: Tenant,
    raw: dict[str, Any],
    idempotency_key: str | None,
) -> Response:
    """POST /v1/responses once the body passed CreateResponseRequest and the caller is
    checked: shared by the FastAPI route and the hot path (http.hot_routes)."""
    parsed = response_requests.parse_create(raw)
    if parsed.stream:  # a reader of its own: 429 at the tenant's bound, before the job exists
        with live_streams.admitted(svc.feeds, tenant.id) as slot:
            outcome = await svc.create(
                tenant_id=tenant.id, request=parsed, raw_body=raw, idempotency_key=idempotency_key
            )
            stream = _stream(
                svc, slot, tenant.id, outcome.job.id, -1, cancel_if_gone=not parsed.background
            )
        stream.headers.update(_created_headers(outcome))
        return stream
    outcome = await svc.create(
        tenant_id=tenant.id, request=parsed, raw_body=raw, idempotency_key=idempotency_key
    )
    job = outcome.job
    headers = _created_headers(outcome)
    if not parsed.background:
        finished = await _finish_or_cancel(svc, request, tenant.id, job.id)
        if finished is None:
            return Response(status_code=499)  # nobody is listening any more
        job = finished
    headers.update(_headers(svc, job))
    return json_response(responses.render(job), 200, headers)


def _created_headers(outcome: SubmitOutcome) -> dict[str, str]:
    headers = {"Location": f"/v1/responses/{outcome.job.id}"}
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    return headers


async def _finish_or_cancel(
    svc: ResponsesService, request: Request, tenant_id: str, response_id: str
) -> Job | None:
    """The finished response; None (and the response cancelled) if the client disconnects
    first."""
    finished = asyncio.create_task(svc.finished(tenant_id=tenant_id, response_id=response_id))
    gone = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({finished, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # The server shutting down cancels this handler: the job is left alone (durable); a
        # retry with the same Idempotency-Key finds it again.
        for task in (finished, gone):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
    if finished.done() and not finished.cancelled():
        return finished.result()  # or its error (e.g. storage unavailable)
    await svc.cancel_abandoned(tenant_id=tenant_id, response_id=response_id)
    return None


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


@router.get(
    "/responses/{response_id}",
    response_model=ResponseOut,
    responses=_STREAMS,
    summary="Retrieve a response",
    description="`?wait=N` (N <= 60, a jobgate extension) answers when the status changes or "
    "after N seconds. `?stream=true` replays the `response.*` events after `starting_after` "
    "(or `Last-Event-ID`) and follows the response until it finishes.",
)
async def get_response(
    response_id: ResponseId,
    svc: Service,
    tenant: CurrentTenant,
    stream: Annotated[bool, Query(description="Answer with server-sent events")] = False,
    starting_after: Annotated[
        int | None,
        Query(ge=0, le=ranges.MAX_SEQ, description="Stream the events after this sequence number"),
    ] = None,
    wait: Annotated[
        float | None,
        Query(
            ge=0,
            le=ranges.MAX_WAIT_S,
            allow_inf_nan=False,
            description="Long poll: answer when the status changes",
        ),
    ] = None,
    last_event_id: Annotated[
        str,
        Header(
            alias="Last-Event-ID",
            pattern=r"^[0-9]{0,18}$",
            description="With `stream`: resume after this sequence number",
        ),
    ] = "",
) -> Response:
    if stream:
        after = -1 if starting_after is None else starting_after
        if last_event_id:
            after = max(after, int(last_event_id))
        with live_streams.admitted(svc.feeds, tenant.id) as slot:  # 429 beyond the bound
            await svc.get(tenant_id=tenant.id, response_id=response_id)  # 404 before streaming
            return _stream(svc, slot, tenant.id, response_id, after, cancel_if_gone=False)
    return await _retrieve(svc, tenant.id, response_id, wait)


async def retrieve(
    request: Request, ctx: AppContext, tenant: Tenant, response_id: str, wait: float | None
) -> Response:
    """GET /v1/responses/{id} without `stream` (a long poll with `wait`) once the id and the
    caller are checked: the hot path's (http.hot_routes) entry to the route above."""
    return await _retrieve(service(ctx), tenant.id, response_id, wait)


async def _retrieve(
    svc: ResponsesService, tenant_id: str, response_id: str, wait: float | None
) -> Response:
    if wait:
        job = await svc.wait(tenant_id=tenant_id, response_id=response_id, timeout_s=wait)
    else:
        job = await svc.get(tenant_id=tenant_id, response_id=response_id)
    return json_response(responses.render(job), 200, _headers(svc, job))


@router.post(
    "/responses/{response_id}/cancel",
    response_model=ResponseOut,
    responses=_PROBLEMS,
    summary="Cancel a response (idempotent, never 409)",
    description="Answers the Response as it stands: `cancelled` once the cancellation has "
    "taken effect (it waits up to 5 s for that), unchanged if it had already finished.",
)
async def cancel_response(response_id: ResponseId, svc: Service, tenant: CurrentTenant) -> Response:
    job = await svc.cancel(tenant_id=tenant.id, response_id=response_id)
    return json_response(responses.render(job), 200, _headers(svc, job))


@router.delete(
    "/responses/{response_id}",
    response_model=DeletedResponseOut,
    responses=_PROBLEMS,
    summary="Delete a response",
    description="Cancels it if still live, then purges its input and output; afterwards it "
    "is not found (its job keeps a tombstone at /v1/jobs/{id}).",
)
async def delete_response(response_id: ResponseId, svc: Service, tenant: CurrentTenant) -> Response:
    await svc.delete(tenant_id=tenant.id, response_id=response_id)
    return json_response({"id": response_id, "object": "response.deleted", "deleted": True})
