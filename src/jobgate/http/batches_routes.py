"""OpenAI's Batch API: create, retrieve, list, cancel (the batches role runs them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
import pydantic
from fastapi import APIRouter, Query
from starlette.responses import Response

from jobgate.http.context import AppContext, Ctx, CurrentTenant
from jobgate.http.models import ProblemOut
from jobgate.http.object_ids import BatchId
from jobgate.http.strict_json import StrictJsonRoute
from jobgate.services.batches import BatchService

router = APIRouter(prefix="/v1", tags=["batches"], route_class=StrictJsonRoute)

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 409, 503)
}


class CreateBatchRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    input_file_id: str = pydantic.Field(min_length=1, max_length=200)
    endpoint: Literal["/v1/chat/completions", "/v1/responses"]
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
    return _json(await service.view(batch))


@router.get("/batches/{batch_id}", responses=_PROBLEMS, summary="Get a batch")
async def get_batch(batch_id: BatchId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    service = batches(ctx)
    return _json(await service.view(await service.get(tenant_id=tenant.id, batch_id=batch_id)))


@router.get("/batches", responses=_PROBLEMS, summary="List batches")
async def list_batches(
    ctx: Ctx,
    tenant: CurrentTenant,
    after: Annotated[
        BatchId | None, Query(description="Id of the last batch of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> Response:
    service = batches(ctx)
    found, more = await service.list(tenant_id=tenant.id, after=after, limit=limit)
    data = [await service.view(batch) for batch in found]
    return _json(
        {
            "object": "list",
            "data": data,
            "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
    )


@router.post("/batches/{batch_id}/cancel", responses=_PROBLEMS, summary="Cancel a batch")
async def cancel_batch(batch_id: BatchId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    service = batches(ctx)
    return _json(await service.view(await service.cancel(tenant_id=tenant.id, batch_id=batch_id)))
