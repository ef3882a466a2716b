"""Native bulk submission: `POST /v1/jobs/bulk`, up to 1,000 submits answered in order."""

from __future__ import annotations

import operator
from typing import Any

import orjson
import pydantic
from fastapi import APIRouter, Request
from starlette.responses import Response

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.http import problems, strict_json
from jobgate.http.context import Ctx, CurrentTenant
from jobgate.http.routes import jobs
from jobgate.http.schemas.native import ProblemOut, ProviderBody, SubmitJobRequest
from jobgate.http.views import job_view
from jobgate.services import submit_many
from jobgate.services.jobs import SubmitSpec
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
    spec = _plain_spec(fields)  # the usual item, without the model; None: any other
    if spec is not None:
        return submit_many.SubmitManyItem(spec, fields, key)
    return _model_item(fields, key)


def _model_item(fields: dict[str, Any], key: str | None) -> submit_many.SubmitManyItem:
    """An item (minus its key) as SubmitJobRequest validates it: its spec or its refusal."""
    try:
        spec = _model_spec(fields)
    except errors.InvalidRequest as exc:
        return submit_many.SubmitManyItem(None, refused=exc)
    return submit_many.SubmitManyItem(spec, raw_body=fields, idempotency_key=key)


def spec_of(fields: dict[str, Any]) -> SubmitSpec:
    """A POST /v1/jobs body whose JSON limits were checked, as the route takes it (the plain
    path or the model, as a bulk item); errors.InvalidRequest as the route refuses it. Shared
    with a batch line (http/batch_lines.py)."""
    spec = _plain_spec(fields)
    return _model_spec(fields) if spec is None else spec


def _model_spec(fields: dict[str, Any]) -> SubmitSpec:
    try:
        payload = SubmitJobRequest.model_validate(fields)
    except pydantic.ValidationError as exc:
        raise problems.invalid_request_of(exc) from None
    # The caller's strict parse checked the JSON limits of the whole body, these fields' too.
    return jobs.submit_spec(payload, fields["body"], json_checked=True)


# The members of the usual item, which _plain_spec reads without the model.
_PLAIN_MEMBERS = frozenset(("endpoint", "body", "metadata"))
_NO_METADATA: dict[str, Any] = {}


def _length_bounds(model: type[pydantic.BaseModel], field: str) -> tuple[int, int]:
    """A string field's (min_length, max_length), as the model declares them."""
    bounds = {"min_length": 0, "max_length": 0}
    for rule in model.model_fields[field].metadata:
        for name in bounds:
            bounds[name] = getattr(rule, name, bounds[name])
    return bounds["min_length"], bounds["max_length"]


_MIN_ENDPOINT, _MAX_ENDPOINT = _length_bounds(SubmitJobRequest, "endpoint")
_MIN_MODEL, _MAX_MODEL = _length_bounds(ProviderBody, "model")
_MAX_METADATA = _length_bounds(SubmitJobRequest, "metadata")[1]


def _plain_spec(fields: dict[str, Any]) -> SubmitSpec | None:
    """The spec of an item of only `endpoint`, `body` (without `sim`) and `metadata` whose
    values SubmitJobRequest takes as they are: the spec submit_spec makes of the model, at a
    fraction of its cost (the model is most of a bulk item's parse). None for any other item,
    which the model then validates, so that every refusal is the model's own."""
    endpoint = fields.get("endpoint")
    body = fields.get("body")
    metadata = fields.get("metadata", _NO_METADATA)
    if (
        type(endpoint) is not str
        or not _MIN_ENDPOINT <= len(endpoint) <= _MAX_ENDPOINT
        or type(body) is not dict
        or type(metadata) is not dict
        or len(metadata) > _MAX_METADATA
        or not fields.keys() <= _PLAIN_MEMBERS
        or "sim" in body
    ):
        return None
    model = body.get("model")
    if model is not None and (type(model) is not str or not _MIN_MODEL <= len(model) <= _MAX_MODEL):
        return None
    # A new dict, as the model's validation makes (the item's keys are JSON's: strings).
    return SubmitSpec(endpoint, body, metadata=dict(metadata), json_checked=True)


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
