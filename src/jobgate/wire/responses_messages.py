"""Responses <-> Anthropic Messages: the request becomes a Messages request (instructions and
system turns as `system`, function calls as tool_use / tool_result blocks, a JSON schema
format and reasoning effort as `output_config`), the `message`
becomes a Response whose `usage` counts cache reads and writes the way OpenAI does (inside
`input_tokens`, broken out in `input_tokens_details`).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from jobgate import errors
from jobgate.wire import responses_input as inputs
from jobgate.wire import responses_objects as shapes

JSONObject = dict[str, Any]

TARGET = "Anthropic Messages"
ENDPOINT = "/v1/messages"
# Messages requires `max_tokens`; Responses does not. Without `max_output_tokens` the bound is
# the model's own (Anthropic's models overview, "Max output"; the API names it when a request
# asks more: "max_tokens: N > 64000, which is the maximum allowed number of output tokens for
# claude-sonnet-4-5"), by the longest prefix of the model name; an unknown model gets the
# provider's configured bound.
MODEL_MAX_OUTPUT: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-8", 128_000), ("claude-opus-4-7", 128_000), ("claude-opus-4-6", 128_000),
    ("claude-sonnet-4-6", 128_000),
    ("claude-opus-4-5", 64_000), ("claude-sonnet-4-5", 64_000), ("claude-haiku-4-5", 64_000),
    ("claude-opus-4-1", 32_000), ("claude-opus-4", 32_000), ("claude-sonnet-4", 64_000),
    ("claude-3-7-sonnet", 64_000), ("claude-3-5-sonnet", 8_192), ("claude-3-5-haiku", 8_192),
    ("claude-3-opus", 4_096), ("claude-3-sonnet", 4_096), ("claude-3-haiku", 4_096),
)  # fmt: skip
KNOWN = frozenset({
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools",
    "tool_choice", "parallel_tool_calls", "text", "reasoning", "user", "top_logprobs", "sim",
    "metadata", "store", "include", "truncation", "service_tier", "prompt_cache_key",
    "safety_identifier",
})  # fmt: skip
_DATA_URL = re.compile(r"^data:(image/[\w.+-]+);base64,(.+)$", re.DOTALL)
_INCOMPLETE = {
    "max_tokens": "max_output_tokens",
    "model_context_window_exceeded": "max_output_tokens",
    "refusal": "content_filter",
}


def model_max_output(model: Any, output_bound: int) -> int:
    """The most a model may answer: its published limit within the provider's bound."""
    name = model if isinstance(model, str) else ""
    known = max(
        (entry for entry in MODEL_MAX_OUTPUT if name.startswith(entry[0])),
        key=lambda entry: len(entry[0]),
        default=None,
    )
    return output_bound if known is None else min(known[1], output_bound)


def to_messages(body: JSONObject, *, output_bound: int) -> JSONObject:
    """The Messages request for a Responses request (`output_bound`: the largest output cap
    the provider allows for its model); errors.InvalidRequest naming the parameter when
    something cannot be expressed."""
    inputs.refuse_unknown(body, KNOWN, target=TARGET)
    system: list[str] = []
    messages: list[JSONObject] = []
    for turn in inputs.turns(body, target=TARGET):
        if isinstance(turn, inputs.Message) and turn.role == "system":
            system.append(turn.text)
            continue
        role, block = _block(turn)
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(block)  # Messages alternates roles: merge turns
        else:
            messages.append({"role": role, "content": block})
    if not messages:
        raise errors.InvalidRequest("input holds no user or assistant message", param="input")
    max_tokens = body.get("max_output_tokens")
    request: JSONObject = {
        "model": body.get("model"),
        "max_tokens": max_tokens
        if isinstance(max_tokens, int)
        else model_max_output(body.get("model"), output_bound),
        "messages": messages,
    }
    if system:
        request["system"] = "\n\n".join(system)
    # Sampling settings (temperature, top_p) are not sent: the Messages API no longer takes
    # them, as OpenAI's reasoning models do not.
    if body.get("sim") is not None:
        request["sim"] = body["sim"]
    if isinstance(body.get("user"), str):
        request["metadata"] = {"user_id": body["user"]}
    _tools(body, request)
    output_config = _output_config(body)
    if output_config:
        request["output_config"] = output_config
    return request


def _block(turn: inputs.Turn) -> tuple[str, list[JSONObject]]:
    if isinstance(turn, inputs.ToolCall):
        try:
            arguments = orjson.loads(turn.arguments or "{}")
        except orjson.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            raise errors.InvalidRequest(
                "a function_call's arguments must be a JSON object for Anthropic models",
                param="input",
            )
        block = {"type": "tool_use", "id": turn.call_id, "name": turn.name, "input": arguments}
        return "assistant", [block]
    if isinstance(turn, inputs.ToolOutput):
        return "user", [
            {"type": "tool_result", "tool_use_id": turn.call_id, "content": turn.output}
        ]
    blocks: list[JSONObject] = []
    for part in turn.parts:
        if isinstance(part, inputs.Text):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        else:
            blocks.append({"type": "image", "source": _image_source(part.url)})
    if not blocks:
        blocks.append({"type": "text", "text": ""})
    return turn.role, blocks


def _image_source(url: str) -> JSONObject:
    match = _DATA_URL.match(url)
    if match:
        return {"type": "base64", "media_type": match.group(1), "data": match.group(2)}
    return {"type": "url", "url": url}


def _tools(body: JSONObject, request: JSONObject) -> None:
    tools = inputs.function_tools(body, target=TARGET)
    converted = []
    for index, tool in enumerate(tools):
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise errors.InvalidRequest(f"tools[{index}].name is required", param=f"tools[{index}]")
        schema = tool.get("parameters")
        entry: JSONObject = {
            "name": name,
            "input_schema": schema
            if isinstance(schema, dict)
            else {"type": "object", "properties": {}},
        }
        if isinstance(tool.get("description"), str):
            entry["description"] = tool["description"]
        converted.append(entry)
    if converted:
        request["tools"] = converted
    choice = body.get("tool_choice")
    mapped: JSONObject | None
    if choice is None:
        mapped = {"type": "auto"} if converted else None
    elif choice in ("auto", "none"):
        mapped = {"type": choice}
    elif choice == "required":
        mapped = {"type": "any"}
    elif isinstance(choice, dict) and choice.get("type") == "function":
        mapped = {"type": "tool", "name": choice.get("name")}
    else:
        raise inputs.unsupported("tool_choice", f"tool_choice {choice!r}", TARGET)
    if mapped is not None and converted:
        if body.get("parallel_tool_calls") is False and mapped["type"] != "none":
            mapped["disable_parallel_tool_use"] = True
        request["tool_choice"] = mapped


def _output_config(body: JSONObject) -> JSONObject:
    """`text.format` and `reasoning.effort`, as Messages' `output_config`."""
    config: JSONObject = {}
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        config["format"] = {"type": "json_schema", "schema": fmt.get("schema") or {}}
    elif kind not in (None, "text"):
        raise inputs.unsupported("text.format", f"format {kind!r}", TARGET)
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    if effort not in (None, "none"):
        config["effort"] = "low" if effort == "minimal" else effort
    top_logprobs = body.get("top_logprobs")
    if isinstance(top_logprobs, int) and top_logprobs > 0:
        raise inputs.unsupported("top_logprobs", "log probabilities", TARGET)
    return config


# -- the answer -------------------------------------------------------------------------------


def from_message(
    message: JSONObject, *, request: JSONObject, job_id: str, created_at: int
) -> JSONObject:
    """The Response for an Anthropic `message`."""
    content = message.get("content")
    if not isinstance(content, list):
        raise errors.ProviderRetryable("the message has no content", code="bad_response")
    stop_reason = message.get("stop_reason")
    reason = _INCOMPLETE.get(stop_reason) if isinstance(stop_reason, str) else None
    status = "incomplete" if reason else "completed"
    suffix = job_id.removeprefix(f"{shapes.ID_PREFIX}_")
    output: list[JSONObject] = []
    text_parts: list[JSONObject] | None = None
    for index, block in enumerate(b for b in content if isinstance(b, dict)):
        kind = block.get("type")
        if kind == "text":
            if text_parts is None:
                text_parts = []
                output.append(shapes.message_item(f"msg_{suffix}", text_parts, status=status))
            text_parts.append(shapes.text_part(str(block.get("text") or "")))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            output.append(
                shapes.function_call_item(
                    f"fc_{suffix}_{index}",
                    str(block.get("id") or f"call_{suffix}_{index}"),
                    str(block.get("name") or ""),
                    arguments,
                )
            )
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            output.append(shapes.reasoning_item(f"rs_{suffix}_{index}", block["thinking"]))
    if not output:
        output.append(shapes.message_item(f"msg_{suffix}", [shapes.text_part("")], status=status))
    usage = _usage(message.get("usage"))
    model = message.get("model") if isinstance(message.get("model"), str) else None
    body = shapes.skeleton(
        request, response_id=job_id, created_at=created_at, status=status, model=model
    )
    body.update(output=output, usage=usage, completed_at=created_at or None)
    if reason:
        body["incomplete_details"] = {"reason": reason}
    return body


def _usage(raw: Any) -> JSONObject:
    """Anthropic's `input_tokens` leaves out cache reads and writes; OpenAI's includes them."""
    usage = raw if isinstance(raw, dict) else {}

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    cache_read = count("cache_read_input_tokens")
    cache_write = count("cache_creation_input_tokens")
    return shapes.usage_object(
        count("input_tokens") + cache_read + cache_write,
        count("output_tokens"),
        cached_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
