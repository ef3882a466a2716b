"""Native bulk submission: `POST /v1/jobs/bulk`, up to 1,000 submits answered in order."""

from __future__ import annotations

import operator
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.http import problems, strict_json, submit_body
from jobgate.http.context import Ctx, CurrentTenant
from jobgate.http.schemas.native import ProblemOut
from jobgate.http.views import job_view
from jobgate.services import submit_many
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
    body = await request.body()
    strict_json.require_json(request, body)
    items = parse_items(body)
    results = await submit_many.submit_bulk(ctx.jobs, tenant_id=tenant.id, items=items)
    return Response(answer_body(results), media_type="application/json")


def parse_items(raw: bytes) -> list[submit_many.SubmitManyItem]:
    """The items of a bulk body; a malformed envelope refuses the call, a malformed item only
    its own slot."""
    payload = strict_json.parse(raw)  # the one strict parse: depth, 64-bit range, strings
    if not isinstance(payload, dict) or set(payload) != {"jobs"}:
        raise errors.InvalidRequest('the body must be {"jobs": [...]}', param="jobs")
    jobs = payload["jobs"]
    if not isinstance(jobs, list):
        raise errors.InvalidRequest("jobs must be an array", param="jobs")
    if len(jobs) > submit_many.MAX_BULK_ITEMS:
        raise errors.InvalidRequest(
            f"at most {submit_many.MAX_BULK_ITEMS} jobs per call (got {len(jobs)})",
            param="jobs",
            code="too_many_items",
        )
    return [_parse_item(index, item) for index, item in enumerate(jobs)]


def _parse_item(index: int, item: Any) -> submit_many.SubmitManyItem:
    if not isinstance(item, dict):
        return submit_many.SubmitManyItem(
            None, refused=errors.InvalidRequest(f"jobs[{index}] must be an object")
        )
    fields = item  # the item minus its key: a copy only when it has one
    key = None
    if "idempotency_key" in item:
        fields = dict(item)
        key = fields.pop("idempotency_key")
    if key is not None and not isinstance(key, str):
        refused = errors.InvalidRequest(
            f"jobs[{index}].idempotency_key must be a string", param="idempotency_key"
        )
        return submit_many.SubmitManyItem(None, refused=refused)
    try:
        spec = submit_body.spec_of(fields)
    except errors.InvalidRequest as exc:
        return submit_many.SubmitManyItem(None, refused=exc)
    return submit_many.SubmitManyItem(spec, fields, key)


def answer_body(results: list[submit_many.ItemResult]) -> bytes:
    """`orjson.dumps({"object": "list", "data": [_item_view(r) for r in results]})`, byte for
    byte, with a new job's view encoded once per shape: the jobs of one call mostly differ only
    in their ids, and job_view + its encoding were ~5 us of a bulk item. A job whose view is
    the same but for its id (same values of the same types, see _shape) answers the first
    such job's encoding with its own id spliced in; any other item is viewed as before."""
    parts = []
    tails: dict[bytes, bytes] = {}
    for result in results:
        shape = None
        if isinstance(result, SubmitOutcome) and not result.replayed:
            shape = _shape(result.job)
        if shape is None:
            parts.append(orjson.dumps(_item_view(result)))
            continue
        assert isinstance(result, SubmitOutcome)
        job_id = orjson.dumps(result.job.id)
        tail = tails.get(shape)
        if tail is None:
            encoded = orjson.dumps(_item_view(result))
            head = b'{"id":' + job_id
            if not encoded.startswith(head):  # never: job_view's first member is the id
                parts.append(encoded)
                continue
            tail = tails[shape] = encoded[len(head) :]
        parts.append(b'{"id":' + job_id + tail)
    return b'{"object":"list","data":[' + b",".join(parts) + b"]}"


# What job_view reads of a job but its id.
_VIEWED = operator.attrgetter(
    "state", "provider", "endpoint", "model", "created_at", "started_at", "completed_at",
    "cancel_requested_at", "expires_at", "attempt", "max_attempts", "priority", "phase",
    "provider_job_id", "provider_request_id", "creation_outcome", "cancel_outcome", "progress",
    "run_at", "concurrency_key", "reconciled_at", "result", "error", "usage", "metadata",
    "dead_lettered", "purged_at",
)  # fmt: skip


def _shape(job: Job) -> bytes | None:
    """What job_view reads of a job but its id, encoded: equal for two jobs exactly when
    their views are equal but for the id. orjson tells apart what equality would not (1, 1.0
    and true; 0.0 and -0.0; the order of a dict's members) and writes a time with its offset
    (a Job's times are aware: the instant, hence to_unix, is the same for the same text). None
    for what orjson cannot encode: such a job is viewed on its own (and refused as before)."""
    try:
        return orjson.dumps(_VIEWED(job))
    except orjson.JSONEncodeError:
        return None


def _item_view(result: submit_many.ItemResult) -> dict[str, Any]:
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
