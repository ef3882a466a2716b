"""OpenAI's Batch API: create, retrieve, list, cancel (the batches role runs them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
import pydantic
from fastapi import APIRouter, Query
from starlette.responses import Response

from jobgate import errors
from jobgate.domain import waiting
from jobgate.domain.waiting import Waiting
from jobgate.http.context import AppContext, Caller, Ctx, CurrentCaller, CurrentTenant
from jobgate.http.object_ids import BatchId
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.strict_json import StrictJsonRoute
from jobgate.services import presence
from jobgate.services.batches import BatchService
from jobgate.storage.records import BatchRecord
from jobgate.wire.openai_batches import BatchStatus

router = APIRouter(prefix="/v1", tags=["batches"], route_class=StrictJsonRoute)

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 409, 503)
}


class CreateBatchRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    input_file_id: str = pydantic.Field(min_length=1, max_length=200)
    endpoint: Literal[
        "/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions"
    ] = pydantic.Field(
        description="Each line's `url` must be it; a provider that does not serve it answers "
        "each line with an error (/v1/embeddings and /v1/completions: an `openai` provider)"
    )
    completion_window: Literal["24h"]
    metadata: dict[str, Any] | None = None
    output_expires_after: dict[str, Any] | None = None  # accepted, not applied


def batches(ctx: AppContext) -> BatchService:
    return BatchService(
        storage=ctx.storage, settings=ctx.settings, ids=ctx.jobs.ids, counts=ctx.batch_counts
    )


def _json(body: Any) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")


@router.post("/batches", responses=_PROBLEMS, summary="Create a batch from a JSONL file")
async def create_batch(payload: CreateBatchRequest, ctx: Ctx, tenant: CurrentTenant) -> Response:
    service = batches(ctx)
    batch = await service.create(
        tenant_id=tenant.id,
        input_file_id=payload.input_file_id,
        endpoint=payload.endpoint,
        completion_window=payload.completion_window,
        metadata=payload.metadata,
    )
    return _json(await _waiting(ctx, await service.view(batch)))


@router.get("/batches/{batch_id}", responses=_PROBLEMS, summary="Get a batch")
async def get_batch(batch_id: BatchId, ctx: Ctx, caller: CurrentCaller) -> Response:
    service = batches(ctx)
    batch = await service.get(tenant_id=_scope(caller), batch_id=batch_id)
    return _json((await _views(ctx, service, caller, [batch]))[0])


@router.get(
    "/batches",
    responses=_PROBLEMS,
    summary="List batches",
    description="A tenant key lists its own batches; an operator key (jgo_…) every tenant's, "
    "each with a `tenant` member, narrowed by `tenant` (a name). `status` narrows either.",
)
async def list_batches(
    ctx: Ctx,
    caller: CurrentCaller,
    after: Annotated[
        BatchId | None, Query(description="Id of the last batch of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    status: Annotated[BatchStatus | None, Query(description="Only batches in this status")] = None,
    tenant: Annotated[
        str | None, Query(max_length=200, description="Operators: only this tenant's batches")
    ] = None,
) -> Response:
    service = batches(ctx)
    scope = _scope(caller)
    if tenant is not None:
        if caller.tenant is not None:
            raise errors.InvalidRequest("only an operator key names a tenant", param="tenant")
        named = await ctx.storage.tenant_get(name=tenant)
        if named is None:
            return _json(_page([]) | {"has_more": False})
        scope = named.id
    found, more = await service.list(
        tenant_id=scope, after=after, limit=limit, status=None if status is None else str(status)
    )
    return _json(_page(await _views(ctx, service, caller, found)) | {"has_more": more})


@router.post("/batches/{batch_id}/cancel", responses=_PROBLEMS, summary="Cancel a batch")
async def cancel_batch(batch_id: BatchId, ctx: Ctx, caller: CurrentCaller) -> Response:
    service = batches(ctx)
    batch = await service.cancel(tenant_id=_scope(caller), batch_id=batch_id, actor=caller.actor)
    return _json((await _views(ctx, service, caller, [batch]))[0])


def _scope(caller: Caller) -> str | None:
    """The tenant whose batches the caller reaches (None: an operator, every tenant's)."""
    return None if caller.tenant is None else caller.tenant.id


def _page(data: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


async def _views(
    ctx: AppContext, service: BatchService, caller: Caller, found: list[BatchRecord]
) -> list[dict[str, Any]]:
    """The batches as OpenAI shows them, a live one with `waiting`; for an operator, each with
    its tenant's name."""
    views = [await _waiting(ctx, await service.view(batch)) for batch in found]
    if caller.tenant is None:
        names: dict[str, str] = {}
        for view, batch in zip(views, found, strict=True):
            if batch.tenant_id not in names:
                known = await ctx.storage.tenant_get(tenant_id=batch.tenant_id)
                names[batch.tenant_id] = batch.tenant_id if known is None else known.name
            view["tenant"] = names[batch.tenant_id]
    return views


# A live batch needs the batches role (it expands the file, then writes the result files) and,
# while in progress, a worker for its requests.
_NEEDS = {
    "validating": (presence.BATCHES,),
    "in_progress": (presence.BATCHES, presence.WORKER),
    "finalizing": (presence.BATCHES,),
    "cancelling": (presence.BATCHES,),
}


async def _waiting(ctx: AppContext, view: dict[str, Any]) -> dict[str, Any]:
    """A live batch's view with `waiting`: `no_worker` while no live process runs a role it
    needs (services.presence), else null."""
    needs = _NEEDS.get(str(view.get("status")))
    if needs is None:
        return view
    view["waiting"] = None
    for role in needs:
        missing = await ctx.presence.missing(role)
        if missing is not None:
            view["waiting"] = Waiting(waiting.NO_WORKER, missing).view()
            break
    return view
