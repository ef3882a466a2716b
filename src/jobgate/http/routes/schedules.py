"""Recurring schedules: create (a cron expression and a job template), list, read, pause,
resume, delete. Each run is an ordinary job (services/schedules.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pydantic
from fastapi import APIRouter, Query
from starlette.responses import Response

from jobgate import errors
from jobgate.clock import to_unix
from jobgate.domain import ranges
from jobgate.http.context import Ctx, CurrentTenant
from jobgate.http.json_response import json_response
from jobgate.http.object_ids import ScheduleId
from jobgate.http.schemas.native import ProblemOut, SubmitJobRequest
from jobgate.http.strict_json import StrictJsonRoute
from jobgate.services import schedules
from jobgate.storage.records import Schedule

router = APIRouter(prefix="/v1", tags=["schedules"], route_class=StrictJsonRoute)
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 403, 404, 413, 503)
}


class CreateScheduleRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    cron: str = pydantic.Field(
        min_length=9,
        max_length=schedules.MAX_CRON_CHARS,
        examples=["*/15 * * * *"],
        description="Five fields (minute hour day month weekday), UTC",
    )
    job: SubmitJobRequest = pydantic.Field(description="The job each run submits")
    paused: bool = pydantic.Field(default=False, strict=True, description="Store it paused")


class ScheduleOut(pydantic.BaseModel):
    id: str
    object: Literal["schedule"]
    cron: str
    job: dict[str, Any]
    paused: bool
    next_run_at: int
    created_at: int


class ScheduleListOut(pydantic.BaseModel):
    object: Literal["list"]
    data: list[ScheduleOut]
    has_more: bool
    last_id: str | None


def schedule_view(schedule: Schedule) -> dict[str, Any]:
    return {
        "id": schedule.id,
        "object": "schedule",
        "cron": schedule.cron,
        "job": schedule.template,
        "paused": schedule.paused,
        "next_run_at": to_unix(schedule.next_run_at),
        "created_at": to_unix(schedule.created_at),
    }


def _service(ctx: Ctx) -> schedules.ScheduleService:
    return schedules.ScheduleService(ctx.jobs)


@router.post(
    "/schedules",
    status_code=201,
    response_model=ScheduleOut,
    responses=_PROBLEMS,
    summary="Create a recurring schedule",
)
async def create_schedule(
    payload: CreateScheduleRequest, ctx: Ctx, tenant: CurrentTenant
) -> Response:
    if payload.job.run_at is not None or payload.job.delay_s is not None:
        raise errors.InvalidRequest(
            "a schedule's job has no run_at or delay_s: the cron expression says when",
            param="job.run_at" if payload.job.run_at is not None else "job.delay_s",
        )
    template = payload.job.model_dump(exclude_none=True, exclude={"body"})
    template["body"] = payload.job.body.model_dump(exclude_none=True)
    schedule = await _service(ctx).create(
        tenant_id=tenant.id, cron=payload.cron, template=template, paused=payload.paused
    )
    return json_response(schedule_view(schedule), 201)


@router.get(
    "/schedules",
    response_model=ScheduleListOut,
    responses=_PROBLEMS,
    summary="List schedules, oldest first",
    description="A page of `limit` schedules after `after` (the `last_id` of the previous "
    "page); `has_more` says whether another page follows.",
)
async def list_schedules(
    ctx: Ctx,
    tenant: CurrentTenant,
    after: Annotated[
        ScheduleId | None, Query(description="Id of the last schedule of the previous page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=ranges.MAX_PAGE)] = 20,
) -> Response:
    found, more = await _service(ctx).list(tenant_id=tenant.id, after=after, limit=limit)
    return json_response(
        {
            "object": "list",
            "data": [schedule_view(s) for s in found],
            "has_more": more,
            "last_id": found[-1].id if found else None,
        }
    )


@router.get(
    "/schedules/{schedule_id}",
    response_model=ScheduleOut,
    responses=_PROBLEMS,
    summary="Read a schedule",
)
async def get_schedule(schedule_id: ScheduleId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    found = await _service(ctx).get(tenant_id=tenant.id, schedule_id=schedule_id)
    return json_response(schedule_view(found))


@router.post(
    "/schedules/{schedule_id}/pause",
    response_model=ScheduleOut,
    responses=_PROBLEMS,
    summary="Pause a schedule (idempotent)",
)
async def pause_schedule(schedule_id: ScheduleId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    changed = await _service(ctx).set_paused(
        tenant_id=tenant.id, schedule_id=schedule_id, paused=True
    )
    return json_response(schedule_view(changed))


@router.post(
    "/schedules/{schedule_id}/resume",
    response_model=ScheduleOut,
    responses=_PROBLEMS,
    summary="Resume a schedule from its next slot (idempotent)",
)
async def resume_schedule(schedule_id: ScheduleId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    changed = await _service(ctx).set_paused(
        tenant_id=tenant.id, schedule_id=schedule_id, paused=False
    )
    return json_response(schedule_view(changed))


@router.delete(
    "/schedules/{schedule_id}",
    responses=_PROBLEMS,
    summary="Delete a schedule (its jobs stay)",
)
async def delete_schedule(schedule_id: ScheduleId, ctx: Ctx, tenant: CurrentTenant) -> Response:
    await _service(ctx).delete(tenant_id=tenant.id, schedule_id=schedule_id)
    return json_response({"id": schedule_id, "object": "schedule", "deleted": True})
