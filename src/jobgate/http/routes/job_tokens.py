"""`POST /v1/jobs/{id}/tokens`: a job token for one of the tenant's jobs, which a backend hands
to a browser or a phone so that it reads, streams or cancels that job without an API key
(http.job_access checks it; services.job_tokens signs it)."""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from fastapi import APIRouter
from starlette.responses import Response

from jobgate import errors
from jobgate.domain import job_tokens
from jobgate.http.context import Ctx, CurrentTenant
from jobgate.http.json_response import json_response
from jobgate.http.object_ids import JobId
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.strict_json import StrictJsonRoute

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=StrictJsonRoute)
_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 404, 409, 413, 503)
}
Scope = Literal["read", "stream", "cancel"]  # job_tokens.SCOPES
_DEFAULT_SCOPES: list[Scope] = ["read", "stream"]  # job_tokens.DEFAULT_SCOPES


class CreateJobTokenRequest(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")

    ttl_s: int = pydantic.Field(
        default=job_tokens.DEFAULT_TTL_S,
        ge=1,
        le=job_tokens.MAX_TTL_S,
        description=f"Seconds the token lives (at most {job_tokens.MAX_TTL_S}: a day)",
    )
    scopes: list[Scope] = pydantic.Field(
        default_factory=lambda: list(_DEFAULT_SCOPES),
        min_length=1,
        max_length=len(job_tokens.SCOPES),
        json_schema_extra={"uniqueItems": True},
        description="`read` (GET the job, its events), `stream` (its output stream), "
        "`cancel` (POST its cancel); each at most once",
    )

    @pydantic.field_validator("ttl_s", mode="before")
    @classmethod
    def _a_number(cls, value: object) -> object:
        # A whole number (3600 or 3600.0, as JSON Schema's integer), never a string or a bool.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("ttl_s must be a whole number of seconds")
        return value

    @pydantic.field_validator("scopes")
    @classmethod
    def _once_each(cls, scopes: list[Scope]) -> list[Scope]:
        if len(set(scopes)) != len(scopes):
            raise ValueError("each scope at most once")
        return scopes


class JobTokenOut(pydantic.BaseModel):
    object: Literal["job_token"]
    token: str = pydantic.Field(
        description="`jgt_…`: send it as `Authorization: Bearer` or `?token=`"
    )
    job_id: str
    scopes: list[Scope]
    expires_at: int = pydantic.Field(description="Unix seconds; refused from then on")


@router.post(
    "/jobs/{job_id}/tokens",
    status_code=201,
    response_model=JobTokenOut,
    responses=_PROBLEMS,
    summary="Create a job token (browser-safe, for this job only)",
    description="A short-lived token that reads (`read`), streams (`stream`) and/or cancels "
    "(`cancel`) this job only, as `Authorization: Bearer jgt_…` or `?token=jgt_…`; anywhere "
    "else it is refused as an unknown key. Needs the tenant's API key (a job token cannot "
    "create one). Purging the job revokes its tokens.",
)
async def create_job_token(
    job_id: JobId, payload: CreateJobTokenRequest, ctx: Ctx, tenant: CurrentTenant
) -> Response:
    job = await ctx.jobs.view(tenant_id=tenant.id, job_id=job_id)
    if job.purged_at is not None:
        raise errors.Conflict(
            f"job {job.id} was purged: it has no token to give", code="job_purged"
        )
    issued = await ctx.job_tokens.issue(
        tenant_id=tenant.id, job_id=job.id, ttl_s=payload.ttl_s, scopes=payload.scopes
    )
    view = {
        "object": "job_token",
        "token": issued.token,
        "job_id": job.id,
        "scopes": job_tokens.ordered(issued.grant.scopes),
        "expires_at": issued.grant.expires_at,
    }
    return json_response(view, 201, {"Cache-Control": "no-store"})
