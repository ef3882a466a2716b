"""Liveness, readiness and problem type documentation."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import PlainTextResponse, Response

from jobgate import errors
from jobgate.http.context import Ctx
from jobgate.http.json_response import json_response
from jobgate.transports import status as transport_status

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness")
async def healthz() -> Response:
    return json_response({"status": "ok"})


@router.get(
    "/readyz",
    summary="Readiness: the storage answers",
    description="`missing_roles` (and a sentence each in `warnings`) names the roles that have "
    "work but no live process: queued jobs without a worker, batches without the batches role, "
    "deliveries without a dispatcher, running jobs without a reaper, background-mode jobs "
    "without a reconciler. Not a reason to take this API out of rotation: it still answers.",
)
async def readyz(ctx: Ctx) -> Response:
    try:
        await ctx.storage.ping()
        missing = await ctx.presence.missing_with_work()
    except errors.StorageError:
        return json_response({"status": "unavailable"}, 503, {"Retry-After": "2"})
    broker = transport_status.readiness_failure(ctx.settings)
    if broker is not None:  # JOBGATE_TRANSPORT_FALLBACK=fail: no claims while it is down
        return json_response({"status": "unavailable", "reason": broker}, 503, {"Retry-After": "5"})
    ready: dict[str, object] = {"status": "ready", "storage": ctx.storage.dialect}
    if missing:
        ready["missing_roles"] = [role for role, _ in missing]
    warnings = [sentence for _, sentence in missing] + transport_status.warnings()
    if warnings:
        ready["warnings"] = warnings
    return json_response(ready)


@router.get("/problems/{code}", include_in_schema=False)
async def problem_type(code: str) -> Response:
    return PlainTextResponse(
        f"jobgate problem type '{code}'. See the `detail` and `error` members of the response "
        "for what went wrong; docs/api.md lists every code.\n"
    )
