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
import pydantic
from fastapi import APIRouter, Depends, Header, Query, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope

from jobgate import errors
from jobgate.domain import ranges, response_requests, responses
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.http import live_streams, problems
from jobgate.http.context import Ctx, CurrentTenant, tenant_of
from jobgate.http.json_response import json_response
from jobgate.http.object_ids import ResponseId
from jobgate.http.routes import asgi
from jobgate.http.routes.asgi import DeclaredRoute, served_by
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.schemas.responses import CreateResponseRequest, DeletedResponseOut, ResponseOut
from jobgate.services.live_feeds import ReaderSlot
from jobgate.services.responses import ResponsesService
from jobgate.storage.records import SubmitOutcome, Tenant

router = APIRouter(prefix="/v1", tags=["responses"], route_class=DeclaredRoute)

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
    events = svc.events(tenant_id=tenant_id, response_id=response_id, after=after)
    return _event_stream(
        svc, slot, tenant_id, response_id, [], events, cancel_if_gone=cancel_if_gone
    )


def _event_stream(
    svc: ResponsesService,
    slot: ReaderSlot,
    tenant_id: str,
    response_id: str,
    opening: list[dict[str, Any]],
    events: AsyncIterator[dict[str, Any]],
    *,
    cancel_if_gone: bool,
) -> EventStream:
    """The SSE answer: `opening` (events already read), then the rest of `events`."""
    finished = False

    async def body() -> AsyncIterator[bytes]:
        nonlocal finished
        try:
            for event in opening:
                yield _sse(event)
            async for event in events:
                yield _sse(event)
            finished = True
        finally:
            if cancel_if_gone and not finished and answer.client_gone:
                await svc.cancel_abandoned(tenant_id=tenant_id, response_id=response_id)

    answer = EventStream(body(), media_type="text/event-stream", headers=live_streams.SSE_HEADERS)
    return live_streams.holding(answer, slot)


async def answer_create(scope: Scope, receive: Receive) -> Response:
    """POST /v1/responses: the strict parse, the caller, the body's model, then `create`."""
    try:
        post = await asgi.json_post(scope, receive, CreateResponseRequest)
        return await create(
            Request(scope, receive),
            service(post.ctx),
            post.tenant,
            post.raw,
            post.header(b"idempotency-key"),
        )
    except errors.JobgateError as exc:
        return problems.answer(exc, openai=True)


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
@served_by(answer_create)
async def create_response(
    payload: CreateResponseRequest,
    request: Request,
    svc: Service,
    tenant: CurrentTenant,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> Response:
    raise AssertionError("declared for /openapi.json; answer_create serves it")


async def create(
    request: Request,
    svc: ResponsesService,
    tenant: Tenant,
    raw: dict[str, Any],
    idempotency_key: str | None,
) -> Response:
    """POST /v1/responses once the body passed CreateResponseRequest and the caller is
    checked."""
    parsed = response_requests.parse_create(raw)
    if parsed.stream:  # a reader of its own: 429 at the tenant's bound, before the job exists
        with live_streams.admitted(svc.feeds, tenant.id) as slot:
            outcome = await svc.create(
                tenant_id=tenant.id, request=parsed, raw_body=raw, idempotency_key=idempotency_key
            )
            headers = _created_headers(outcome)
            if not parsed.background:
                return await _stream_once_under_way(
                    svc, slot, request, tenant.id, outcome.job.id, headers
                )
            stream = _stream(svc, slot, tenant.id, outcome.job.id, -1, cancel_if_gone=False)
        stream.headers.update(headers)
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
        if job.state is JobState.FAILED:
            return _failed(job, headers)
    headers.update(_headers(svc, job))
    return json_response(responses.render(job), 200, headers)


def _failed(job: Job, headers: dict[str, str]) -> Response:
    """A synchronous create whose response failed: OpenAI's HTTP error (the SDK raises), with
    the `Location` of the failed response, which stays retrievable."""
    status, error = responses.http_error(job)
    return problems.problem(
        status,
        code=error["code"],
        title="Response failed",
        detail=error["message"],
        error_type=error["type"],
        headers=headers,
    )


# The events a stream opens with before anything of the answer itself.
_OPENING = frozenset({"response.created", "response.queued", "response.in_progress"})


async def _stream_once_under_way(
    svc: ResponsesService,
    slot: ReaderSlot,
    request: Request,
    tenant_id: str,
    response_id: str,
    headers: dict[str, str],
) -> Response:
    """A synchronous stream, answered once its output begins (or it ends): a response that
    fails before its first output event answers the HTTP error, as OpenAI answers a request
    it refuses, instead of a stream of one `response.failed`. A client that leaves meanwhile
    cancels it. `slot` is held by the stream, or given back."""
    events = svc.events(tenant_id=tenant_id, response_id=response_id, after=-1)
    opening: list[dict[str, Any]] = []
    read = asyncio.create_task(_read_opening(events, opening))
    try:
        under_way = await _first_or_disconnect(read, request)
        if under_way:
            read.result()  # its error, if any (e.g. storage unavailable)
    except BaseException:
        await events.aclose()
        slot.release()
        raise
    if not under_way:
        await events.aclose()
        slot.release()
        await svc.cancel_abandoned(tenant_id=tenant_id, response_id=response_id)
        return Response(status_code=499)  # nobody is listening any more
    last = opening[-1]["type"] if opening else None
    if last == "response.failed" and all(e["type"] in _OPENING for e in opening[:-1]):
        await events.aclose()
        slot.release()
        return _failed(await svc.get(tenant_id=tenant_id, response_id=response_id), headers)
    stream = _event_stream(svc, slot, tenant_id, response_id, opening, events, cancel_if_gone=True)
    stream.headers.update(headers)
    return stream


async def _read_opening(
    events: AsyncIterator[dict[str, Any]], opening: list[dict[str, Any]]
) -> None:
    """Read `events` into `opening` up to the first one past the stream's opening (its first
    output event, or the terminal one); keep-alives are not kept (nothing is sent yet)."""
    async for event in events:
        if event:
            opening.append(event)
            if event["type"] not in _OPENING:
                return


async def _first_or_disconnect(task: asyncio.Task[Any], request: Request) -> bool:
    """Wait for `task`; False (and the task cancelled) if the client disconnects first."""
    gone = asyncio.create_task(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # The server shutting down cancels this handler: the job is left alone (durable).
        for pending in (task, gone):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
    return task.done() and not task.cancelled()


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


StreamQuery = Annotated[bool, Query(description="Answer with server-sent events")]
StartingAfterQuery = Annotated[
    int | None,
    Query(ge=0, le=ranges.MAX_SEQ, description="Stream the events after this sequence number"),
]
WaitQuery = Annotated[
    float | None,
    Query(
        ge=0,
        le=ranges.MAX_WAIT_S,
        allow_inf_nan=False,
        description="Long poll: answer when the status changes",
    ),
]
LastEventIdHeader = Annotated[
    str,
    Header(
        alias="Last-Event-ID",
        pattern=r"^[0-9]{0,18}$",
        description="With `stream`: resume after this sequence number",
    ),
]
_RESPONSE_ID = pydantic.TypeAdapter(ResponseId)
_STREAM = pydantic.TypeAdapter(StreamQuery)
_STARTING_AFTER = pydantic.TypeAdapter(StartingAfterQuery)
_WAIT = pydantic.TypeAdapter(WaitQuery)
_LAST_EVENT_ID = pydantic.TypeAdapter(LastEventIdHeader)
_RESPONSE_PREFIX = "/v1/responses/"


async def answer_retrieve(scope: Scope, receive: Receive) -> Response:
    """GET /v1/responses/{id}: the caller, then the id, the query and `Last-Event-ID` as
    their declarations take them (in FastAPI's order), then `retrieve`."""
    found = asgi.headers(scope)
    response_id = asgi.path_param(scope, "response_id", _RESPONSE_PREFIX)
    try:
        ctx = asgi.context(scope)
        tenant = await tenant_of(ctx, asgi.text(found.get(b"authorization")) or "")
        asgi.object_id(_RESPONSE_ID, response_id, "response_id")
        params = asgi.query(scope)
        stream, starting_after, wait = False, None, None
        if params:
            if "stream" in params:
                stream = asgi.checked(_STREAM, params["stream"], ("query", "stream"))
            if "starting_after" in params:
                at = ("query", "starting_after")
                starting_after = asgi.checked(_STARTING_AFTER, params["starting_after"], at)
            if "wait" in params:
                wait = asgi.checked(_WAIT, params["wait"], ("query", "wait"))
        last_event_id = asgi.text(found.get(b"last-event-id"))
        if last_event_id is not None:
            at = ("header", "Last-Event-ID")
            last_event_id = asgi.checked(_LAST_EVENT_ID, last_event_id, at)
        return await retrieve(
            service(ctx), tenant, response_id, stream, starting_after, wait, last_event_id or ""
        )
    except errors.JobgateError as exc:
        return problems.answer(exc, openai=True)


@router.get(
    "/responses/{response_id}",
    response_model=ResponseOut,
    responses=_STREAMS,
    summary="Retrieve a response",
    description="`?wait=N` (N <= 60, a jobgate extension) answers when the status changes or "
    "after N seconds. `?stream=true` replays the `response.*` events after `starting_after` "
    "(or `Last-Event-ID`) and follows the response until it finishes.",
)
@served_by(answer_retrieve)
async def get_response(
    response_id: ResponseId,
    svc: Service,
    tenant: CurrentTenant,
    stream: StreamQuery = False,
    starting_after: StartingAfterQuery = None,
    wait: WaitQuery = None,
    last_event_id: LastEventIdHeader = "",
) -> Response:
    raise AssertionError("declared for /openapi.json; answer_retrieve serves it")


async def retrieve(
    svc: ResponsesService,
    tenant: Tenant,
    response_id: str,
    stream: bool,
    starting_after: int | None,
    wait: float | None,
    last_event_id: str,
) -> Response:
    """GET /v1/responses/{id} once the caller and the parameters are checked: its events
    with `stream`, else the Response (a long poll with `wait`)."""
    if stream:
        after = -1 if starting_after is None else starting_after
        if last_event_id:
            after = max(after, int(last_event_id))
        with live_streams.admitted(svc.feeds, tenant.id) as slot:  # 429 beyond the bound
            await svc.get(tenant_id=tenant.id, response_id=response_id)  # 404 before streaming
            return _stream(svc, slot, tenant.id, response_id, after, cancel_if_gone=False)
    return await _retrieve(svc, tenant.id, response_id, wait)


async def _retrieve(
    svc: ResponsesService, tenant_id: str, response_id: str, wait: float | None
) -> Response:
    if wait:
        job = await svc.wait(tenant_id=tenant_id, response_id=response_id, timeout_s=wait)
    else:  # a status read: a read replica may answer it
        job = await svc.get(tenant_id=tenant_id, response_id=response_id, may_lag=True)
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
