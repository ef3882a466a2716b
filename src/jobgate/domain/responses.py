"""The OpenAI Response object that a /v1/responses job is, in every state: the status mapping,
the request's settings echoed back, the result's output and usage normalised to the published
shape. Clients validate every body with the official SDK in strict mode, so nothing here may
emit a member of the wrong type, whatever the provider answered.
"""

from __future__ import annotations

from typing import Any

import orjson

from jobgate.clock import to_unix
from jobgate.domain import continuation
from jobgate.domain.job import Job
from jobgate.domain.states import JobState

JSONObject = dict[str, Any]
ENDPOINT = "/v1/responses"
API = "responses"
ID_PREFIX = "resp"

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
SERVICE_TIERS = frozenset({"auto", "default", "flex", "scale", "priority"})
TRUNCATIONS = frozenset({"auto", "disabled"})
ITEM_STATUSES = frozenset({"in_progress", "completed", "incomplete"})


def _member(value: Any, allowed: frozenset[str]) -> bool:
    """Whether `value` is one of the strings `allowed`; any other JSON value (a provider's or
    a client's object or list included) is not, and is never looked up."""
    return isinstance(value, str) and value in allowed


def status_of(job: Job) -> str:
    """The Response status of a job. A succeeded job whose result says `incomplete` (cut
    short at max_output_tokens, or filtered) is `incomplete`."""
    if job.state is JobState.SUCCEEDED and (job.result or {}).get("status") == "incomplete":
        return "incomplete"
    return STATUS_BY_STATE[job.state]


# -- usage ------------------------------------------------------------------------------------


def usage_object(
    input_tokens: int,
    output_tokens: int,
    *,
    cached_tokens: int = 0,
    cache_write_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> JSONObject:
    """A complete `usage`: every member the SDK requires, details included."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached_tokens,
            "cache_write_tokens": cache_write_tokens,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def normalise_usage(raw: Any) -> JSONObject:
    """A provider's Responses `usage` with every required member present (servers that
    implement the Responses API often leave the details out, or predate cache_write_tokens)."""
    usage = raw if isinstance(raw, dict) else {}
    inputs = usage.get("input_tokens_details")
    inputs = inputs if isinstance(inputs, dict) else {}
    outputs = usage.get("output_tokens_details")
    outputs = outputs if isinstance(outputs, dict) else {}
    shaped = usage_object(
        _count(usage.get("input_tokens")),
        _count(usage.get("output_tokens")),
        cached_tokens=_count(inputs.get("cached_tokens")),
        cache_write_tokens=_count(inputs.get("cache_write_tokens")),
        reasoning_tokens=_count(outputs.get("reasoning_tokens")),
    )
    # A provider's total may count more than input plus output (tool tokens): keep it.
    shaped["total_tokens"] = max(shaped["total_tokens"], _count(usage.get("total_tokens")))
    return shaped


# -- output items -----------------------------------------------------------------------------


def message_item(item_id: str, parts: list[JSONObject], *, status: str = "completed") -> JSONObject:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": parts,
    }


def text_part(text: str) -> JSONObject:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def refusal_part(refusal: str) -> JSONObject:
    return {"type": "refusal", "refusal": refusal}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str) -> JSONObject:
    return {
        "id": item_id,
        "type": "function_call",
        "status": "completed",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def reasoning_item(item_id: str, text: str) -> JSONObject:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


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
        if not _member(item.get("status"), ITEM_STATUSES):
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


def _pick(request: JSONObject, key: str, kinds: tuple[type, ...], default: Any) -> Any:
    """request[key] if it has one of `kinds` (a bool is not taken for a number), else default."""
    value = request.get(key)
    if isinstance(value, bool) and bool not in kinds:
        return default
    return value if isinstance(value, kinds) else default


def skeleton(
    request: JSONObject,
    *,
    response_id: str,
    created_at: int,
    status: str,
    model: str | None = None,
) -> JSONObject:
    """A Response for `request` in `status`, without output, usage or error: the settings the
    request made (or OpenAI's defaults), exactly as OpenAI echoes them."""
    metadata = request.get("metadata")
    reasoning = request.get("reasoning")
    text = request.get("text")
    truncation = request.get("truncation")
    service_tier = request.get("service_tier")
    prompt_cache_key = request.get("prompt_cache_key")
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": request.get("background") is True,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": _pick(request, "instructions", (str,), None),
        "max_output_tokens": _pick(request, "max_output_tokens", (int,), None),
        "max_tool_calls": _pick(request, "max_tool_calls", (int,), None),
        "metadata": metadata if isinstance(metadata, dict) else {},
        "model": model or _pick(request, "model", (str,), ""),
        "output": [],
        "parallel_tool_calls": _pick(request, "parallel_tool_calls", (bool,), True),
        "previous_response_id": _pick(request, "previous_response_id", (str,), None),
        "prompt_cache_key": prompt_cache_key if isinstance(prompt_cache_key, str) else None,
        "reasoning": reasoning if isinstance(reasoning, dict) else None,
        "safety_identifier": _pick(request, "safety_identifier", (str,), None),
        "service_tier": service_tier if _member(service_tier, SERVICE_TIERS) else "auto",
        "temperature": _pick(request, "temperature", (int, float), 1.0),
        "text": text if isinstance(text, dict) else {"format": {"type": "text"}},
        "tool_choice": _pick(request, "tool_choice", (str, dict), "auto"),
        "tools": _pick(request, "tools", (list,), []),
        "top_logprobs": _pick(request, "top_logprobs", (int,), 0),
        "top_p": _pick(request, "top_p", (int, float), 1.0),
        "truncation": truncation if _member(truncation, TRUNCATIONS) else "disabled",
        "usage": None,
        "user": _pick(request, "user", (str,), None),
        **_conversation(request),
    }


def _conversation(request: JSONObject) -> JSONObject:
    """`conversation` of a response created on one (left out otherwise, as OpenAI does)."""
    conversation = continuation.conversation_id(request)
    return {} if conversation is None else {"conversation": {"id": conversation}}


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
        if _member(result.get("service_tier"), SERVICE_TIERS):
            body["service_tier"] = result["service_tier"]
        if status == "incomplete":
            details = result.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            body["incomplete_details"] = {
                "reason": reason if _member(reason, INCOMPLETE_REASONS) else None
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
