"""A caller's OpenAI-format batch line as an Anthropic Message Batches request.

A `/v1/chat/completions` body is read as the Responses request it equals
(`chat_as_responses`) and both endpoints become Messages params through the Responses ->
Messages translation (wire.responses_messages), so one set of rules says what Anthropic can be
asked; the request goes under the part's short custom_id (wire.anthropic_batch_results). A
line's own `sim` travels in its params: the simulator reads it per request (a real provider
refuses the member, like any it does not know). A body that cannot be expressed for Anthropic
raises errors.InvalidRequest naming the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobgate import errors
from jobgate.wire import openai_batches as batches
from jobgate.wire import responses_messages

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
