"""The native job API: submit, read, long-poll, stream events, cancel, list, delete, retry."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
import pydantic
from fastapi import APIRouter, Header, Query, Request
from starlette.responses import Response
from starlette.types import Receive, Scope

from jobgate import errors, failpoints
from jobgate.domain import job_search, ranges
from jobgate.domain.bulk import MAX_METADATA_KEYS
from jobgate.domain.states import JobState
from jobgate.http import job_access, job_notes, live_streams, problems, submit_body
from jobgate.http.context import AppContext, Ctx, CurrentTenant
from jobgate.http.disconnect import unless_disconnected
from jobgate.http.job_access import JobCaller, JobCanceller, JobReader
from jobgate.http.json_response import json_response
from jobgate.http.object_ids import JobId
from jobgate.http.routes import asgi
from jobgate.http.routes.asgi import DeclaredRoute, served_by
from jobgate.http.schemas.native import (
    EventListOut,
    JobListOut,
    JobOut,
    ProblemOut,
    SubmitJobRequest,
)
from jobgate.http.views import event_view, job_view
from jobgate.services import live_feeds
from jobgate.services.jobs import SubmitSpec
from jobgate.storage.records import Tenant

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=DeclaredRoute)

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 409, 413, 422, 429, 503)
}
_PREFER_WAIT = re.compile(r"(?:^|[;,\s])wait\s*=\s*(\d+)", re.IGNORECASE)
_KEEPALIVE_S = 15.0


def _job_headers(ctx: AppContext, job: Any) -> dict[str, str]:
    if job.terminal:
        return {}
    return {"Retry-After": str(ctx.jobs.retry_after_s(job))}


def submit_body_of(found: dict[bytes, bytes], body: bytes, raw: Any) -> SubmitSpec:
    """POST /v1/jobs's body as its declared model (SubmitJobRequest) takes it, by the one
    check of a submit body (http.submit_body); a body that is not an object is refused as the
    model refuses it."""
    value = asgi.body_value(found, body, raw)
    if isinstance(value, dict):
        return submit_body.spec_of(value)
    asgi.body_of(SubmitJobRequest, found, body, raw)  # refuses it: the model takes objects
    raise AssertionError("SubmitJobRequest took a body that is not an object")


async def answer_submit(scope: Scope, receive: Receive) -> Response:
    """POST /v1/jobs: the strict parse, the caller, the body's check, then `submit`."""
    try:
        post = await asgi.json_post_checked(scope, receive, submit_body_of)
        return await submit(
            Request(scope, receive),
            post.ctx,
            post.tenant,
            post.payload,
            post.raw,
            post.header(b"idempotency-key"),
            post.header(b"prefer"),
        )
    except errors.JobgateError as exc:
        return problems.answer(exc)


@router.post(
    "/jobs",
    status_code=202,
    response_model=JobOut,
    responses=_PROBLEMS,
    summary="Submit a job",
    description="Stores the job durably and answers at once (202). `Prefer: wait=N` (N <= 60) "
    "waits up to N seconds and answers 200 if the job finished in time.",
)
@served_by(answer_submit)
async def submit_job(
    payload: SubmitJobRequest,
    request: Request,
    ctx: Ctx,
    tenant: CurrentTenant,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    prefer: Annotated[str | None, Header(alias="Prefer")] = None,
) -> Response:
    raise AssertionError("declared for /openapi.json; answer_submit serves it")


async def submit(
    request: Request,
    ctx: AppContext,
    tenant: Tenant,
    spec: SubmitSpec,
    raw: dict[str, Any],
    idempotency_key: str | None,
    prefer: str | None,
) -> Response:
    """POST /v1/jobs once the body is parsed (by `strict_json.parse`, whose JSON limits the
    service then does not check again) and checked and the caller known."""
    outcome = await ctx.jobs.submit(
        tenant_id=tenant.id, spec=spec, raw_body=raw, idempotency_key=idempotency_key
    )
    failpoints.hit("after_submit_commit_before_response")
    job = outcome.job
    status = outcome.status_code
    headers = {"Location": f"/v1/jobs/{job.id}"}
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    wait_s = _prefer_wait(prefer)
    if wait_s is not None:
        headers["Preference-Applied"] = f"wait={int(wait_s)}"
        waited = await unless_disconnected(
            request,
            ctx.jobs.wait(
                tenant_id=tenant.id,
                job_id=job.id,
                timeout_s=wait_s,
                until_terminal=True,
                read_as="view",
            ),
        )
        if waited is None:
            return Response(status_code=499)  # nobody is listening any more
        job = waited
        if job.terminal and not outcome.replayed:
            status = 200
    headers.update(_job_headers(ctx, job))
    return json_response(job_view(job), status, headers)


def _prefer_wait(prefer: str | None) -> float | None:
    if not prefer:
        return None
    match = _PREFER_WAIT.search(prefer)
    return None if match is None else min(float(match.group(1)), ranges.MAX_WAIT_S)


_JOB_ID = pydantic.TypeAdapter(JobId)
_JOB_PREFIX = "/v1/jobs/"
WaitQuery = Annotated[
    float | None,
    Query(
        ge=0,
        le=ranges.MAX_WAIT_S,
        allow_inf_nan=False,
        description="Long poll: answer when the status changes, or after this many seconds",
    ),
]
WAIT = pydantic.TypeAdapter(WaitQuery)


def wait_of(params: dict[str, str]) -> float | None:
    """`?wait=` as its declaration (WaitQuery) takes it."""
    wait = params.get("wait")
    return None if wait is None else asgi.checked(WAIT, wait, ("query", "wait"))


async def answer_read(scope: Scope, receive: Receive) -> Response:
    """GET /v1/jobs/{id}: the caller (a key, or a job token with `read`), the id, `wait`, then
    `read_job`."""
    found = asgi.headers(scope)
    job_id = asgi.path_param(scope, "job_id", _JOB_PREFIX)
    params = asgi.query(scope)
    try:
        ctx = asgi.context(scope)
        authorization = asgi.text(found.get(b"authorization"))
        caller = await job_access.caller_of(ctx, authorization, params.get("token"), job_id, "read")
        asgi.object_id(_JOB_ID, job_id, "job_id")
        wait = wait_of(params)
        return await read_job(Request(scope, receive), ctx, caller, job_id, wait)
    except errors.JobgateError as exc:
        return problems.answer(exc)


@router.get(
    "/jobs/{job_id}",
    response_model=JobOut,
    responses=_PROBLEMS,
    summary="Get a job",
    description="With the tenant's API key, or a job token of this job with scope `read`.",
)
@served_by(answer_read)
async def get_job(
    job_id: JobId,
    request: Request,
    ctx: Ctx,
    caller: JobReader,
    wait: WaitQuery = None,
) -> Response:
    raise AssertionError("declared for /openapi.json; answer_read serves it")


async def read_job(
    request: Request, ctx: AppContext, caller: JobCaller, job_id: str, wait: float | None
) -> Response:
    """GET /v1/jobs/{id} (a long poll with `wait`) once the id and the caller are checked."""
    tenant_id = caller.tenant_id
    if wait:
        waited = await unless_disconnected(
            request,
            ctx.jobs.wait(tenant_id=tenant_id, job_id=job_id, timeout_s=wait, read_as="view"),
        )
        if waited is None:
            return Response(status_code=499)  # nobody is listening any more
        job, read = caller.admit(waited), None
    else:
        status = await ctx.jobs.status(tenant_id=tenant_id, job_id=job_id)
        job, read = caller.admit(status.job), status.wait
    view = await job_notes.annotate(ctx, job, job_view(job), read=read)
    return json_response(view, 200, _job_headers(ctx, job))


@router.get(
    "/jobs/{job_id}/events",
    response_model=EventListOut,
    responses=_PROBLEMS,
    summary="A job's transition log",
    description="JSON list, or with `Accept: text/event-stream` a live SSE stream that ends "
    "after the terminal event; resume with `Last-Event-ID`. With the tenant's API key, or a "
    "job token of this job with scope `read`.",
)
async def job_events(
    job_id: JobId,
    request: Request,
    ctx: Ctx,
    caller: JobReader,
    after: Annotated[
        int, Query(ge=0, le=ranges.MAX_SEQ, description="Events after this sequence number")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=ranges.MAX_EVENT_PAGE)] = 100,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> Response:
    if "text/event-stream" in request.headers.get("accept", ""):
        start = after
        if last_event_id:
            try:
                start = max(start, min(int(last_event_id), ranges.MAX_SEQ))
            except ValueError:
                raise errors.InvalidRequest(
                    "Last-Event-ID must be an event sequence number", param="Last-Event-ID"
                ) from None
        with live_streams.admitted(ctx.feeds, caller.tenant_id) as slot:  # 429 beyond the bound
            # 404 before the stream
            caller.admit(await ctx.jobs.view(tenant_id=caller.tenant_id, job_id=job_id))
            return live_streams.sse(_event_stream(ctx, caller.tenant_id, job_id, start), slot)
    await caller.check(ctx.jobs, job_id)
    events = await ctx.jobs.events(
        tenant_id=caller.tenant_id, job_id=job_id, after_seq=after, limit=limit + 1
    )
    return json_response(
        {
            "object": "list",
            "data": [event_view(e) for e in events[:limit]],
            "has_more": len(events) > limit,
        }
    )


async def _event_stream(ctx: Ctx, tenant_id: str, job_id: str, after: int) -> AsyncIterator[bytes]:
    """The transitions after `after` as the job's feed (services.live_feeds, shared by every
    reader of the job in this process) reads them, until the job is terminal. Ends early, where
    the client can resume, if the job is deleted or the stream cannot be carried on."""
    last = after
    try:
        async with ctx.feeds.follow(tenant_id=tenant_id, job_id=job_id, kind="events") as feed:
            seen = 0
            while True:
                snapshot = await feed.next(seen, _KEEPALIVE_S)
                if snapshot is None:
                    yield b": keep-alive\n\n"
                    continue
                seen = snapshot.version
                for event in snapshot.events:
                    if event.seq > last:
                        last = event.seq
                        data = orjson.dumps(event_view(event)).decode()
                        yield f"id: {event.seq}\nevent: job.event\ndata: {data}\n\n".encode()
                if snapshot.job.terminal:
                    return
    except (errors.NotFound, errors.StorageError, live_feeds.FeedEnded):
        return  # deleted meanwhile, or cut where the client resumes (Last-Event-ID)


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobOut,
    responses=_PROBLEMS,
    summary="Cancel a job (idempotent, never 409)",
    description="With the tenant's API key, or a job token of this job with scope `cancel`.",
)
async def cancel_job(job_id: JobId, ctx: Ctx, caller: JobCanceller) -> Response:
    await caller.check(ctx.jobs, job_id)
    actor = "api" if caller.grant is None else "api:job_token"
    job = await ctx.jobs.cancel(tenant_id=caller.tenant_id, job_id=job_id, actor=actor)
    return json_response(job_view(job), 200, _job_headers(ctx, job))


_TIME = (
    "Unix seconds (`1796133600`) or an RFC 3339 date-time with its offset (`2026-12-01T14:00:00Z`)"
)
_SEARCH_DOC = {
    "parameters": [
        {
            "name": "metadata",
            "in": "query",
            "style": "deepObject",
            "explode": True,
            "required": False,
            "description": "`metadata[KEY]=VALUE`, repeatable: jobs whose metadata holds each "
            f"KEY (a top-level member, at most {job_search.MAX_METADATA_KEY_CHARS} characters) "
            "with exactly this string value (at most "
            f"{job_search.MAX_METADATA_VALUE_CHARS}); at most {MAX_METADATA_KEYS} pairs",
            "schema": {
                "type": "object",
                "maxProperties": MAX_METADATA_KEYS,
                "propertyNames": {
                    "minLength": 1,
                    "maxLength": job_search.MAX_METADATA_KEY_CHARS,
                    "pattern": r"^[^\x00]*$",
                },
                "additionalProperties": {
                    "type": "string",
                    "maxLength": job_search.MAX_METADATA_VALUE_CHARS,
                    "pattern": r"^[^\x00]*$",
                },
            },
        }
    ]
}


def _name_query(description: str) -> Any:
    # Bounds shown, not checked here: job_search.read checks every criterion, naming it.
    bounds = {"minLength": 1, "maxLength": job_search.MAX_NAME_CHARS}
    return Query(description=description, json_schema_extra=bounds)


def _time_query(description: str) -> Any:
    pattern = {"pattern": job_search.TIME_PATTERN}
    return Query(description=description, json_schema_extra=pattern)


@router.get(
    "/jobs",
    response_model=JobListOut,
    responses=_PROBLEMS,
    summary="List and search jobs",
    description="Newest first. Every filter given must hold; pages chain by `after` (the "
    "previous page's `last_id`) with the same filters, while `has_more` is true. A search "
    "(model, provider, metadata, created_after/before) reads at most "
    f"{job_search.WALK_ROWS:,} of the tenant's jobs per page, so its page may be partial: "
    "fewer jobs than `limit`, even none, with `has_more` true and `last_id` the last job read "
    "(not always one shown); keep paging. An unknown parameter is refused (400), so a "
    "misspelt filter never lists every job.",
    openapi_extra=_SEARCH_DOC,
)
async def list_jobs(
    request: Request,
    ctx: Ctx,
    tenant: CurrentTenant,
    status: Annotated[list[JobState] | None, Query(description="Filter by status")] = None,
    dead_lettered: Annotated[bool | None, Query()] = None,
    after: Annotated[
        JobId | None, Query(description="Id of the last job of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=ranges.MAX_PAGE)] = 20,
    model: Annotated[str | None, _name_query("The job's model, exactly")] = None,
    provider: Annotated[str | None, _name_query("The job's provider, exactly")] = None,
    created_after: Annotated[
        str | None, _time_query(f"Created at or after this time: {_TIME}")
    ] = None,
    created_before: Annotated[str | None, _time_query(f"Created before this time: {_TIME}")] = None,
) -> Response:
    # The search is read from the whole query string in one place (job_search.read), which
    # checks each criterion, refuses unknown names and reads metadata[KEY]; the parameters
    # above declare the criteria for the OpenAPI document.
    page = await ctx.jobs.list(
        tenant_id=tenant.id,
        states=status,
        dead_lettered=dead_lettered,
        after=after,
        limit=limit,
        search=job_search.read(request.query_params.multi_items()),
    )
    views = await job_notes.annotate_page(ctx, page.jobs, [job_view(job) for job in page.jobs])
    return json_response(
        {"object": "list", "data": views, "has_more": page.has_more, "last_id": page.last_id}
    )


@router.delete(
    "/jobs/{job_id}",
    response_model=JobOut,
    responses=_PROBLEMS,
    summary="Cancel if live, then purge input and result",
)
async def delete_job(job_id: JobId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    job = await ctx.jobs.delete(tenant_id=tenant.id, job_id=job_id)
    return json_response(job_view(job))


@router.post(
    "/jobs/{job_id}/retry",
    status_code=202,
    response_model=JobOut,
    responses=_PROBLEMS,
    summary="Redrive a dead-lettered job",
)
async def retry_job(job_id: JobId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    job = await ctx.jobs.retry(tenant_id=tenant.id, job_id=job_id)
    return json_response(
        job_view(job), 202, {"Location": f"/v1/jobs/{job.id}", **_job_headers(ctx, job)}
    )
