"""Bulk actions by filter: POST /v1/jobs/bulk_cancel, /bulk_redrive and /bulk_delete.

A tenant key acts on that tenant's jobs (actor `api:bulk`); an operator key (jgo_…) on any
tenant's (actor `operator:<name>`). Each call changes at most `limit` jobs in short
transactions and answers a cursor (`last_id`, `has_more`) to continue; `dry_run` counts.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from jobgate import errors
from jobgate.clock import from_unix
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.http.context import AppContext, Ctx, caller_of
from jobgate.http.json_response import json_response
from jobgate.http.schemas.bulk_actions import BulkActionOut, BulkActionRequest, JobFilterIn
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.strict_json import StrictJsonRoute
from jobgate.services import bulk_actions

router = APIRouter(prefix="/v1", tags=["jobs"], route_class=StrictJsonRoute)

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 413, 503)
}


async def _caller(request: Request, where: JobFilterIn) -> bulk_actions.Caller:
    """Who acts: an operator on any tenant's jobs, a tenant key on its own tenant's only. A
    tenant key's filter naming another tenant could match nothing: refused, saying why,
    rather than answered with 0 as if no job fitted."""
    caller = await caller_of(request)
    if caller.tenant is None:
        return bulk_actions.Caller(actor=caller.actor, tenant_id=None)
    own = caller.tenant.name
    if where.tenant is not None and where.tenant != own:
        raise errors.InvalidRequest(
            f"this is tenant {own!r}'s key, which acts on {own!r}'s jobs only, so "
            f"tenant={where.tenant} matches none: use an operator key (jgo_…; "
            "`jobgate key --operator`) to act on other tenants' jobs",
            param="where.tenant",
            code="tenant_outside_key",
        )
    return bulk_actions.Caller(actor="api:bulk", tenant_id=caller.tenant.id)


async def _filter(ctx: AppContext, where: JobFilterIn) -> JobFilter:
    tenant_id = None
    if where.tenant is not None:
        tenant = await ctx.storage.tenant_get(name=where.tenant)
        tenant_id = "" if tenant is None else tenant.id  # an unknown tenant matches nothing
    return JobFilter(
        tenant_id=tenant_id,
        states=None if where.status is None else tuple(where.status),
        provider=where.provider,
        model=where.model,
        error_code=where.error_code,
        created_after=None if where.created_after is None else from_unix(where.created_after),
        created_before=None if where.created_before is None else from_unix(where.created_before),
        metadata=where.metadata,
        dead_lettered=where.dead_lettered,
    )


async def _act(
    action: BulkAction, payload: BulkActionRequest, request: Request, ctx: AppContext
) -> Response:
    caller = await _caller(request, payload.where)
    where = await _filter(ctx, payload.where)
    service = bulk_actions.BulkActions(storage=ctx.storage)
    body: dict[str, Any] = {"object": "bulk_action", "action": str(action)}
    if payload.dry_run:
        matched = await service.count(caller=caller, action=action, where=where)
        body |= {"dry_run": True, "matched": matched, "changed": 0}
        return json_response(body | {"last_id": None, "has_more": False})
    outcome = await service.apply(
        caller=caller,
        action=action,
        where=where,
        note=payload.reason,
        after=payload.after,
        max_jobs=payload.limit,
    )
    if caller.tenant_id is not None:  # its next reads see the change (replica_reads)
        ctx.jobs.reads.wrote(caller.tenant_id)
    body |= {"dry_run": False, "matched": None, "changed": outcome.changed}
    return json_response(body | {"last_id": outcome.last_id, "has_more": outcome.has_more})


_DOC = (
    " Every job matching `where` (AND of the criteria) that the action applies to, at most "
    "`limit` per call in short transactions; continue with `after` = `last_id` while "
    "`has_more`. Each changed job gets an event with the caller as actor and the reason. "
    "`dry_run` only counts. A tenant key acts on its own jobs; an operator key on any tenant's."
)


@router.post(
    "/jobs/bulk_cancel",
    response_model=BulkActionOut,
    responses=_PROBLEMS,
    summary="Cancel jobs by filter",
    description="Queued jobs are cancelled at once, running ones by request." + _DOC,
)
async def bulk_cancel(payload: BulkActionRequest, request: Request, ctx: Ctx) -> Response:
    return await _act(BulkAction.CANCEL, payload, request, ctx)


@router.post(
    "/jobs/bulk_redrive",
    response_model=BulkActionOut,
    responses=_PROBLEMS,
    summary="Redrive dead-lettered jobs by filter",
    description="Dead-lettered failed jobs go back to the queue with a fresh attempt series; "
    "a purged job is never redriven (its request is gone)." + _DOC,
)
async def bulk_redrive(payload: BulkActionRequest, request: Request, ctx: Ctx) -> Response:
    return await _act(BulkAction.REDRIVE, payload, request, ctx)


@router.post(
    "/jobs/bulk_delete",
    response_model=BulkActionOut,
    responses=_PROBLEMS,
    summary="Delete jobs by filter",
    description="As DELETE /v1/jobs/{id}: cancel if live, then erase input and result (the "
    "tombstone stays until JOBGATE_RETENTION_S)." + _DOC,
)
async def bulk_delete(payload: BulkActionRequest, request: Request, ctx: Ctx) -> Response:
    return await _act(BulkAction.DELETE, payload, request, ctx)
