"""The OpenAI Response object that a /v1/responses job is, in every state: the status mapping,
the request's settings echoed back, the result's output and usage normalised to the published
shape. Clients validate every body with the official SDK in strict mode, so nothing here may
emit a member of the wrong type, whatever the provider answered.
"""

from __future__ import annotations

from typing import Any

import orjson

from jobgate.clock import to_unix
from jobgate.domain.job import Job
from jobgate.domain.states import JobState
from jobgate.wire.responses_objects import (
    ID_PREFIX,
    SERVICE_TIERS,
    normalise_usage,
    one_of,
    skeleton,
)

JSONObject = dict[str, Any]
ENDPOINT = "/v1/responses"
API = "responses"

STATUS_BY_STATE: dict[JobState, str] = {
    JobState.QUEUED: "queued",
    JobState.RUNNING: "in_progress",
    JobState.SUCCEEDED: "completed",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
    JobState.EXPIRED: "cancelled",  # with `expired: true` (a jobgate extension)
}
FINISHED = frozenset({"completed", "incomplete"})  # statuses that carry output and usage

# `error.code` of a failed Response may only be one of OpenAI's codes (the SDK's Literal);
# jobgate's own code goes in `error.type`.
OPENAI_ERROR_CODES = frozenset({
    "server_error", "rate_limit_exceeded", "invalid_prompt", "data_residency_mismatch",
    "bio_policy", "misalignment_policy_violation", "vector_store_timeout", "invalid_image",
    "invalid_image_format", "invalid_base64_image", "invalid_image_url", "image_too_large",
    "image_too_small", "image_parse_error", "image_content_policy_violation",
    "invalid_image_mode", "image_file_too_large", "unsupported_image_media_type",
    "empty_image_file", "failed_to_download_image", "image_file_not_found",
})  # fmt: skip
INCOMPLETE_REASONS = frozenset({"max_output_tokens", "max_messages", "content_filter", "steered"})
ITEM_STATUSES = frozenset({"in_progress", "completed", "incomplete"})


def status_of(job: Job) -> str:
    """The Response status of a job. A succeeded job whose result says `incomplete` (cut
    short at max_output_tokens, or filtered) is `incomplete`."""
    if job.state is JobState.SUCCEEDED and (job.result or {}).get("status") == "incomplete":
        return "incomplete"
    return STATUS_BY_STATE[job.state]


def _normalise_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    if part.get("type") == "output_text":
        fixed = {**part, "text": part.get("text") if isinstance(part.get("text"), str) else ""}
        if not isinstance(part.get("annotations"), list):
            fixed["annotations"] = []
        return fixed
    return part


def _normalise_item(item: Any, index: int, response_id: str) -> Any:
    """Fill the members that OpenAI-compatible servers commonly leave out of output items."""
    if not isinstance(item, dict):
        return item
    kind = item.get("type")
    fixed = dict(item)
    if kind in ("message", "function_call", "reasoning") and not isinstance(item.get("id"), str):
        prefix = {"message": "msg", "function_call": "fc", "reasoning": "rs"}[kind]
        fixed["id"] = f"{prefix}_{response_id.removeprefix(f'{ID_PREFIX}_')}_{index}"
    if kind == "message":
        fixed["role"] = "assistant"
        if not one_of(item.get("status"), ITEM_STATUSES):
            fixed["status"] = "completed"
        content = item.get("content")
        parts = content if isinstance(content, list) else []
        fixed["content"] = [_normalise_part(part) for part in parts]
    elif kind == "reasoning" and not isinstance(item.get("summary"), list):
        fixed["summary"] = []
    return fixed


def normalise_output(raw: Any, response_id: str) -> list[Any]:
    if not isinstance(raw, list):
        return []
    return [_normalise_item(item, index, response_id) for index, item in enumerate(raw)]


# -- live output ------------------------------------------------------------------------------


def streamed(job: Job) -> bool:
    """Whether the job streams its output live (a create with `stream: true`)."""
    return isinstance(job.request, dict) and job.request.get("stream") is True


def live_item_id(response_id: str, generation: int) -> str:
    """The id of the message item that carries a streamed response's text while it runs: the
    id the translating providers give their message (`msg_<suffix>`), suffixed by the attempt
    from the second on (so an earlier attempt's item keeps an id of its own)."""
    suffix = response_id.removeprefix(f"{ID_PREFIX}_")
    return f"msg_{suffix}" if generation <= 1 else f"msg_{suffix}_{generation}"


def as_streamed(output: list[Any], job: Job) -> list[Any]:
    """A streamed response's output as its stream announced it: the message whose text was
    streamed first (its deltas came before the provider said what else it answered), under
    the live item's id; the other items after it, in their order."""
    first = next(
        (
            i
            for i, item in enumerate(output)
            if isinstance(item, dict) and item.get("type") == "message"
        ),
        None,
    )
    if first is None:
        return output
    message = {**output[first], "id": live_item_id(job.id, job.run_count)}
    return [message, *output[:first], *output[first + 1 :]]


# -- the object -------------------------------------------------------------------------------


def error_object(error: JSONObject | None) -> JSONObject:
    """A failed Response's `error`: one of OpenAI's codes, jobgate's own code as `type`."""
    details = error or {}
    code = details.get("code") if isinstance(details.get("code"), str) else "server_error"
    kind = details.get("type")
    message = details.get("message")
    if code in OPENAI_ERROR_CODES:
        openai_code = code
    elif kind == "rate_limit_error":
        openai_code = "rate_limit_exceeded"
    elif kind == "invalid_request_error":
        openai_code = "invalid_prompt"  # the provider refused the request as it was sent
    else:
        openai_code = "server_error"
    return {
        "code": openai_code,
        "message": message if isinstance(message, str) and message else "the response failed",
        "type": code,
        "param": None,
    }


# A failed response answered to a synchronous create: (HTTP status, OpenAI error type, code),
# by the family of the job's error; any other family is a server error.
_HTTP_ERRORS: dict[str, tuple[int, str, str | None]] = {
    "invalid_request_error": (400, "invalid_request_error", "invalid_prompt"),
    "rate_limit_error": (429, "rate_limit_error", "rate_limit_exceeded"),
    "insufficient_quota": (429, "insufficient_quota", None),  # None: the provider's code
}


def http_error(job: Job) -> tuple[int, JSONObject]:
    """The HTTP status and OpenAI `error` a synchronous create answers for a response that
    failed, so that the SDK raises as it would against OpenAI (BadRequestError,
    RateLimitError, InternalServerError) instead of returning a `failed` Response."""
    details = job.error or {}
    kind = details.get("type")
    status, openai_type, code = _HTTP_ERRORS.get(
        kind if isinstance(kind, str) else "", (500, "server_error", "server_error")
    )
    if code is None:
        own = details.get("code")
        code = own if isinstance(own, str) and own else openai_type
    message = error_object(job.error)["message"]
    return status, {"message": message, "type": openai_type, "code": code, "param": None}


def render(job: Job) -> JSONObject:
    """The Response object of a /v1/responses job as it stands."""
    status = status_of(job)
    request = job.request or {}
    created_at = to_unix(job.created_at) or 0
    body = skeleton(request, response_id=job.id, created_at=created_at, status=status)
    if status in FINISHED:
        result = job.result or {}
        body["output"] = normalise_output(result.get("output"), job.id)
        if streamed(job):
            body["output"] = as_streamed(body["output"], job)
        body["usage"] = normalise_usage(result.get("usage"))
        body["completed_at"] = to_unix(job.completed_at)
        if isinstance(result.get("model"), str) and result["model"]:
            body["model"] = result["model"]
        if one_of(result.get("service_tier"), SERVICE_TIERS):
            body["service_tier"] = result["service_tier"]
        if status == "incomplete":
            details = result.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            body["incomplete_details"] = {
                "reason": reason if one_of(reason, INCOMPLETE_REASONS) else None
            }
    elif status == "failed":
        body["error"] = error_object(job.error)
    body["expired"] = job.state is JobState.EXPIRED  # jobgate extension: never started in time
    return body


def pending(job: Job, status: str) -> JSONObject:
    """The Response as it was while `status` (queued, in_progress), for the stream events
    replayed later: the request's settings, no output, usage, error or completion yet."""
    created_at = to_unix(job.created_at) or 0
    body = skeleton(job.request or {}, response_id=job.id, created_at=created_at, status=status)
    body["expired"] = False
    return body


# -- webhooks ---------------------------------------------------------------------------------


def webhook_event(
    *, event_id: str, event_type: str, created_at: int, response_id: str
) -> JSONObject:
    """OpenAI's thin webhook event about a response (`data` holds only its id), which
    `openai.OpenAI(webhook_secret=...).webhooks.unwrap()` verifies and types."""
    return {
        "id": event_id,
        "object": "event",
        "type": event_type,
        "created_at": created_at,
        "data": {"id": response_id},
    }


def webhook_body(event: JSONObject, response: JSONObject | None, *, max_bytes: int) -> bytes:
    """The event with the whole Response under `data.response` (an endpoint that asked for
    results); above `max_bytes` it is left out and `data.response_truncated` is true."""
    full = {**event, "data": {**event["data"], "response": response, "response_truncated": False}}
    body = orjson.dumps(full)
    if len(body) <= max_bytes:
        return body
    thin = {**event, "data": {**event["data"], "response_truncated": True}}
    return orjson.dumps(thin)
