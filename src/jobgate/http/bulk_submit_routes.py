"""Native bulk submission: `POST /v1/jobs/bulk`, up to 1,000 submits answered in order."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
from fastapi import APIRouter, Request
from starlette.responses import Response

from jobgate import errors
from jobgate.http import jobs_routes, problems, strict_json
from jobgate.http.context import Ctx, CurrentTenant
from jobgate.http.models import ProblemOut, SubmitJobRequest
from jobgate.http.views import job_view
from jobgate.services import bulk_submit
from jobgate.storage.records import SubmitOutcome

router = APIRouter(prefix="/v1", tags=["jobs"])

_PROBLEMS: dict[int | str, dict[str, Any]] = {
    status: {"model": ProblemOut, "content": {"application/problem+json": {}}}
    for status in (400, 401, 409, 413, 429, 503)
}


_BODY_SCHEMA = {
    "type": "object",
    "required": ["jobs"],
    "additionalProperties": False,
    "properties": {
        "jobs": {
            "type": "array",
            "maxItems": 1000,
            # Any value: an item that is not a valid submit is refused in its own slot.
            "items": {"description": "A POST /v1/jobs body, and optionally an "
                      "`idempotency_key` (1-255 printable ASCII characters)"},
        }
    },
}  # fmt: skip


@router.post(
    "/jobs/bulk",
    status_code=200,
    responses=_PROBLEMS,
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/json": {"schema": _BODY_SCHEMA}}}
    },
    summary="Submit many jobs",
    description='`{"jobs": [submit body + optional "idempotency_key", ...]}` (at most 1,000). '
    "Every acceptable item is stored in one transaction; the answer has one entry per item, "
    'in order: the job, or `{"object": "error", "status", "error": {...}}` for an item '
    "refused alone (the others are stored). A full queue refuses the whole call (429).",
)
async def submit_bulk(request: Request, ctx: Ctx, tenant: CurrentTenant) -> Response:
    items = parse_items(await request.body())
    results = await bulk_submit.submit_bulk(ctx.jobs, tenant_id=tenant.id, items=items)
    data = [_item_view(result) for result in results]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")


def parse_items(raw: bytes) -> list[bulk_submit.BulkSubmit]:
    """The items of a bulk body; a malformed envelope refuses the call, a malformed item only
    its own slot."""
    payload = strict_json.parse(raw)  # the one strict parse: depth, 64-bit range, strings
    if not isinstance(payload, dict) or set(payload) != {"jobs"}:
        raise errors.InvalidRequest('the body must be {"jobs": [...]}', param="jobs")
    jobs = payload["jobs"]
    if not isinstance(jobs, list):
        raise errors.InvalidRequest("jobs must be an array", param="jobs")
    if len(jobs) > bulk_submit.MAX_BULK_ITEMS:
        raise errors.InvalidRequest(
            f"at most {bulk_submit.MAX_BULK_ITEMS} jobs per call (got {len(jobs)})",
            param="jobs",
            code="too_many_items",
        )
    return [_parse_item(index, item) for index, item in enumerate(jobs)]


def _parse_item(index: int, item: Any) -> bulk_submit.BulkSubmit:
    where = f"jobs[{index}]"
    if not isinstance(item, dict):
        return bulk_submit.BulkSubmit(
            None, refused=errors.InvalidRequest(f"{where} must be an object")
        )
    fields = dict(item)
    key = fields.pop("idempotency_key", None)
    if key is not None and not isinstance(key, str):
        refused = errors.InvalidRequest(
            f"{where}.idempotency_key must be a string", param="idempotency_key"
        )
        return bulk_submit.BulkSubmit(None, refused=refused)
    try:
        payload = SubmitJobRequest.model_validate(fields)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first.get("loc", ())) or None
        message = f"{param}: {first.get('msg')}" if param else str(first.get("msg"))
        return bulk_submit.BulkSubmit(None, refused=errors.InvalidRequest(message, param=param))
    # parse_items' strict parse checked the JSON limits of the whole body, this item's too.
    spec = jobs_routes.submit_spec(payload, fields["body"], json_checked=True)
    return bulk_submit.BulkSubmit(spec, raw_body=fields, idempotency_key=key)


def _item_view(result: bulk_submit.ItemResult) -> dict[str, Any]:
    if isinstance(result, SubmitOutcome):
        view = job_view(result.job)
        if result.replayed:
            view["idempotent_replayed"] = True
        return view
    answer = problems.from_error(result)
    body: dict[str, Any] = orjson.loads(bytes(answer.body))
    return {
        "object": "error",
        "status": answer.status_code,
        "code": body["code"],
        "error": body["error"],
    }
