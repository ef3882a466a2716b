"""Pauses (operator keys only): POST /v1/pauses holds back the claims of a provider, a model
and/or a tenant; GET /v1/pauses lists them; DELETE /v1/pauses/{id} resumes (services/pauses.py).
A tenant key is refused (403): a pause reaches every tenant's jobs."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic
from fastapi import APIRouter, Depends, Request
from starlette.responses import Response

from jobgate import errors
from jobgate.clock import to_unix
from jobgate.http.context import Ctx, context
from jobgate.http.json_response import json_response
from jobgate.http.object_ids import PauseId
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.strict_json import StrictJsonRoute
from jobgate.services import operators, pauses
from jobgate.storage.records import Pause

router = APIRouter(prefix="/v1", tags=["operations"], route_class=StrictJsonRoute)
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 413, 503)
}
_PROBLEMS[403] = {
    "model": ProblemOut,
    "content": {"application/problem+json": {}},
    "description": "A tenant key: pauses need an operator key (`jgo_…`)",
}


async def operator_of(request: Request) -> str:
    """The operator whose Bearer key (jgo_…) authorises this request: errors.Unauthorized
    without a live key, errors.Forbidden for a tenant's key."""
    ctx = context(request)
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise errors.Unauthorized("missing API key: send 'Authorization: Bearer jgo_…'")
    if key.startswith(operators.KEY_PREFIX):
        return await ctx.operators.authenticate(key)
    await ctx.tenants.authenticate(key)  # an unknown key is a 401, not a 403
    raise errors.Forbidden("pauses need an operator key (jgo_…): a tenant key may not pause")


Operator = Annotated[str, Depends(operator_of)]


class CreatePauseRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    provider: str | None = pydantic.Field(
        default=None, max_length=pauses.MAX_NAME_CHARS, description="A configured provider"
    )
    model: str | None = pydantic.Field(
        default=None, max_length=pauses.MAX_NAME_CHARS, description="A model its jobs name"
    )
    tenant: str | None = pydantic.Field(
        default=None, max_length=pauses.MAX_NAME_CHARS, description="A tenant's name"
    )
    reason: str | None = pydantic.Field(
        default=None, max_length=pauses.MAX_REASON_CHARS, description="Shown on held jobs"
    )


class PauseOut(pydantic.BaseModel):
    id: str
    object: Literal["pause"]
    provider: str | None
    model: str | None
    tenant: str | None
    reason: str | None
    created_by: str
    created_at: int
    deleted: bool | None = None


class PauseListOut(pydantic.BaseModel):
    object: Literal["list"]
    data: list[PauseOut]


def pause_view(pause: Pause, tenant_names: dict[str, str]) -> dict[str, Any]:
    tenant = None if pause.tenant_id is None else tenant_names.get(pause.tenant_id)
    return {
        "id": pause.id,
        "object": "pause",
        "provider": pause.provider,
        "model": pause.model,
        "tenant": tenant,
        "reason": pause.reason,
        "created_by": pause.created_by,
        "created_at": to_unix(pause.created_at),
    }


@router.post(
    "/pauses",
    status_code=201,
    response_model=PauseOut,
    responses=_PROBLEMS,
    summary="Pause claims of a provider, model and/or tenant (operator key)",
    description="Queued jobs the pause covers stay queued (`waiting.reason` `paused`) until it "
    "is deleted; running jobs finish. Every member left out matches anything (none: every "
    "job).",
)
async def create_pause(payload: CreatePauseRequest, ctx: Ctx, operator: Operator) -> Response:
    service = ctx.pauses
    scope = pauses.Scope(provider=payload.provider, model=payload.model, tenant=payload.tenant)
    pause = await service.pause(scope, reason=payload.reason, operator=operator)
    view = pause_view(pause, await service.tenant_names([pause]))
    return json_response(view, 201)


@router.get(
    "/pauses",
    response_model=PauseListOut,
    responses=_PROBLEMS,
    summary="List pauses (operator key)",
)
async def list_pauses(ctx: Ctx, operator: Operator) -> Response:
    service = ctx.pauses
    found = await service.all()
    names = await service.tenant_names(found)
    return json_response({"object": "list", "data": [pause_view(p, names) for p in found]})


@router.delete(
    "/pauses/{pause_id}",
    response_model=PauseOut,
    responses=_PROBLEMS,
    summary="Resume: delete a pause (operator key)",
)
async def delete_pause(pause_id: PauseId, ctx: Ctx, operator: Operator) -> Response:
    service = ctx.pauses
    (resumed,) = await service.resume(pause_id, operator=operator)
    view = pause_view(resumed, await service.tenant_names([resumed]))
    return json_response(view | {"deleted": True})
