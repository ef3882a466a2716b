"""A caller's OpenAI-format batch line as an Anthropic Message Batches request, and a result of
that request as the caller's answer.

Out: a `/v1/chat/completions` body is read as the Responses request it equals
(`chat_as_responses`) and both endpoints become Messages params through the Responses ->
Messages translation (wire.responses_messages), so one set of rules says what Anthropic can be
asked; the request goes under the part's short custom_id (wire.anthropic_batch_results). A
line's own `sim` travels in its params when the line still holds one: the simulator reads it
per request (providers.batch_parts takes it out for a real provider, which refuses the
member). A body that cannot be expressed for Anthropic raises errors.InvalidRequest naming
the parameter.

Back: a `succeeded` result becomes a 200 whose body is a `chat.completion` or a `response`, as
the caller's endpoint answers; `errored` becomes the provider's status and an OpenAI-shaped
error body; `canceled` and `expired` (and a line the results file lacks) become error lines
with the codes jobgate's own batches use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from jobgate import errors
from jobgate.wire import openai_batches as batches
from jobgate.wire import responses_messages, responses_objects

JSONObject = dict[str, Any]

TARGET = "Anthropic Message Batches"
# Chat Completions members carried over (renamed where Responses names them otherwise);
# any other is handed on as it is, and refused by the Responses translation if it cannot be
# expressed for Anthropic (never dropped silently).
_RENAMED = {"max_completion_tokens": "max_output_tokens", "max_tokens": "max_output_tokens"}
_HANDLED = frozenset(
    {"messages", "tools", "tool_choice", "response_format", "reasoning_effort", "stream"}
)


def to_request(line: Mapping[str, Any], *, custom_id: str, output_bound: int) -> JSONObject:
    """The Message Batches request for a caller's line (`{"custom_id", "method", "url",
    "body"}`); errors.InvalidRequest naming the parameter when the body cannot be expressed
    for Anthropic."""
    url, body = line.get("url"), line.get("body")
    if not isinstance(body, dict):
        raise errors.InvalidRequest("body must be an object", param="body")
    if url == batches.CHAT:
        params = responses_messages.to_messages(chat_as_responses(body), output_bound=output_bound)
    elif url == batches.RESPONSES:
        params = responses_messages.to_messages(body, output_bound=output_bound)
    else:
        raise errors.InvalidRequest(
            f"url {url!r} cannot be sent to {TARGET}", param="url", code="unsupported_endpoint"
        )
    return {"custom_id": custom_id, "params": params}


def chat_as_responses(body: Mapping[str, Any]) -> JSONObject:
    """The Responses request a Chat Completions body asks the same of: messages as input
    items (tool calls as function_call items, tool messages as their outputs), function tools
    flattened, `response_format` as `text.format`, `reasoning_effort` as `reasoning`."""
    if body.get("stream") is True:
        raise errors.InvalidRequest("stream: a batch line cannot stream", param="stream")
    request: JSONObject = {}
    for key, value in body.items():
        if key == "n" and value in (None, 1):
            continue  # one choice: what Messages answers
        if key not in _HANDLED:
            request[_RENAMED.get(key, key)] = value
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise errors.InvalidRequest("messages must be a non-empty array", param="messages")
    request["input"] = [
        item
        for index, message in enumerate(messages)
        for item in _items(message, f"messages[{index}]")
    ]
    if body.get("tools") is not None:
        request["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(body["tools"])]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        request["tool_choice"] = {"type": "function", "name": name}
    elif choice is not None:
        request["tool_choice"] = choice
    text = _text_format(body.get("response_format"))
    if text is not None:
        request["text"] = text
    if body.get("reasoning_effort") is not None:
        request["reasoning"] = {"effort": body["reasoning_effort"]}
    return request


def _items(message: Any, where: str) -> list[JSONObject]:
    if not isinstance(message, dict):
        raise errors.InvalidRequest(f"{where} must be an object", param=where)
    role = message.get("role")
    content = message.get("content")
    if role == "tool":
        call_id = message.get("tool_call_id")
        output = content if isinstance(content, str) else _text(content)
        return [{"type": "function_call_output", "call_id": call_id, "output": output}]
    items: list[JSONObject] = []
    if (content is not None and content != "") or not message.get("tool_calls"):
        items.append({"type": "message", "role": role, "content": _parts(content, role, where)})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise errors.InvalidRequest(
                f"{where}.tool_calls[{index}] must be a function call", param=where
            )
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return items


def _parts(content: Any, role: Any, where: str) -> Any:
    if content is None:
        return ""
    if not isinstance(content, list):
        return content  # a string, or something the Responses reading refuses by name
    text_type = "output_text" if role == "assistant" else "input_text"
    parts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            parts.append({"type": text_type, "text": part.get("text")})
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            parts.append({"type": "input_image", "image_url": url})
        elif kind == "refusal":
            parts.append({"type": "refusal", "refusal": part.get("refusal")})
        else:
            raise errors.InvalidRequest(
                f"{where}.content[{index}]: content of type {kind!r} cannot be sent to {TARGET}",
                param=f"{where}.content[{index}]",
                code="unsupported_parameter",
            )
    return parts


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text") or "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _tool(tool: Any, where: str) -> Any:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return tool  # refused by name by the Responses reading
    function = tool.get("function")
    if not isinstance(function, dict):
        raise errors.InvalidRequest(f"{where}.function is required", param=where)
    flat = {"type": "function", "name": function.get("name")}
    for key in ("description", "parameters", "strict"):
        if key in function:
            flat[key] = function[key]
    return flat


def _text_format(response_format: Any) -> JSONObject | None:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_schema":
        schema = response_format.get("json_schema")
        schema = schema if isinstance(schema, dict) else {}
        return {"format": {"type": "json_schema", "schema": schema.get("schema") or {}}}
    raise errors.InvalidRequest(
        f"response_format: format {kind!r} cannot be sent to {TARGET}",
        param="response_format",
        code="unsupported_parameter",
    )


# -- a result back as the caller's answer --------------------------------------------------

# An `errored` result's error type as the HTTP status the same error has on a Messages call.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
_STOP = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
}
NOT_RUN = {
    "canceled": batches.NOT_RUN["cancelled"],
    "expired": batches.NOT_RUN["expired"],
    "missing": ("batch_line_missing", "The provider returned no result for this request."),
}


def answer_body(line: Mapping[str, Any], message: JSONObject, created_at: int) -> JSONObject:
    """The body a succeeded result answers the caller's line with: a `response` for a
    /v1/responses line, else a `chat.completion`."""
    body = line.get("body") if isinstance(line.get("body"), dict) else {}
    assert isinstance(body, dict)
    if line.get("url") == batches.RESPONSES:
        suffix = str(message.get("id") or "").removeprefix("msg_")
        return responses_messages.from_message(
            message,
            request=body,
            job_id=f"{responses_objects.ID_PREFIX}_{suffix}",
            created_at=created_at,
        )
    return chat_completion(message, created_at=created_at)


def chat_completion(message: Mapping[str, Any], *, created_at: int) -> JSONObject:
    """The `chat.completion` an Anthropic `message` answers: its text as the content, its
    tool_use blocks as tool calls, its usage with cache reads and writes inside
    prompt_tokens (as OpenAI counts them)."""
    raw = message.get("content")
    content: list[Any] = raw if isinstance(raw, list) else []
    text = "".join(
        str(block.get("text") or "")
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    )
    calls = [
        {
            "id": str(block.get("id") or ""),
            "type": "function",
            "function": {
                "name": str(block.get("name") or ""),
                "arguments": orjson.dumps(block.get("input") or {}).decode(),
            },
        }
        for block in content
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    reply: JSONObject = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    if calls:
        reply["tool_calls"] = calls
    stop_reason = message.get("stop_reason")
    prompt_tokens, completion_tokens, cached_tokens = _tokens(message.get("usage"))
    return {
        "id": f"chatcmpl-{str(message.get('id') or '').removeprefix('msg_')}",
        "object": "chat.completion",
        "created": created_at,
        "model": message.get("model"),
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": _STOP.get(str(stop_reason), "stop"),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }


def error_answer(raw: Any) -> tuple[int, JSONObject]:
    """An errored result's error (`{"type": "error", "error": {"type", "message"}}`) as the
    status and OpenAI-shaped body the caller's error line carries."""
    inner = raw.get("error") if isinstance(raw, dict) else None
    error = inner if isinstance(inner, dict) else raw if isinstance(raw, dict) else {}
    kind = error.get("type") if isinstance(error.get("type"), str) else "api_error"
    message = error.get("message") if isinstance(error.get("message"), str) else kind
    status = ERROR_STATUS.get(str(kind), 500)
    body = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return status, body


def _tokens(raw: Any) -> tuple[int, int, int]:
    """An Anthropic `usage` as OpenAI counts it: (prompt tokens with cache reads and writes
    inside, completion tokens, cache reads)."""
    usage = raw if isinstance(raw, dict) else {}

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    cache_read = count("cache_read_input_tokens")
    cache_write = count("cache_creation_input_tokens")
    return count("input_tokens") + cache_read + cache_write, count("output_tokens"), cache_read
