"""The parts of an OpenAI Response object as the API publishes them, whoever builds one (the
job's Response in domain/responses.py, the translations from Chat Completions and Messages):
the skeleton echoing a request's settings, its output items and parts, a complete `usage`.
Clients validate every body with the official SDK in strict mode, so nothing here may emit a
member of the wrong type, whatever the request or the provider said."""

from __future__ import annotations

from typing import Any

JSONObject = dict[str, Any]
ID_PREFIX = "resp"  # a Response's id is `resp_<suffix>`; its items' ids derive from the suffix
SERVICE_TIERS = frozenset({"auto", "default", "flex", "scale", "priority"})
TRUNCATIONS = frozenset({"auto", "disabled"})
CONVERSATION = "conversation"


def one_of(value: Any, allowed: frozenset[str]) -> bool:
    """Whether `value` is one of the strings `allowed`; any other JSON value (a provider's or
    a client's object or list included) is not, and is never looked up."""
    return isinstance(value, str) and value in allowed


def conversation_id(payload: JSONObject) -> str | None:
    """The conversation a create continues (given as its id or as `{"id": …}`)."""
    given = payload.get(CONVERSATION)
    if isinstance(given, dict):
        given = given.get("id")
    return given if isinstance(given, str) else None


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
        "service_tier": service_tier if one_of(service_tier, SERVICE_TIERS) else "auto",
        "temperature": _pick(request, "temperature", (int, float), 1.0),
        "text": text if isinstance(text, dict) else {"format": {"type": "text"}},
        "tool_choice": _pick(request, "tool_choice", (str, dict), "auto"),
        "tools": _pick(request, "tools", (list,), []),
        "top_logprobs": _pick(request, "top_logprobs", (int,), 0),
        "top_p": _pick(request, "top_p", (int, float), 1.0),
        "truncation": truncation if one_of(truncation, TRUNCATIONS) else "disabled",
        "usage": None,
        "user": _pick(request, "user", (str,), None),
        **_conversation(request),
    }


def _conversation(request: JSONObject) -> JSONObject:
    """`conversation` of a response created on one (left out otherwise, as OpenAI does)."""
    conversation = conversation_id(request)
    return {} if conversation is None else {"conversation": {"id": conversation}}
