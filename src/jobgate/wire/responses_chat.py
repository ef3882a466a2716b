"""Responses <-> Chat Completions, for OpenAI-compatible servers that have no Responses API:
the request becomes a `chat.completion` request, the completion becomes a Response with
`output` items and an exact `usage` (cached and reasoning tokens carried over).
"""

from __future__ import annotations

from typing import Any

from jobgate import errors
from jobgate.wire import responses_input as inputs
from jobgate.wire import responses_objects as shapes

JSONObject = dict[str, Any]

TARGET = "Chat Completions"
ENDPOINT = "/v1/chat/completions"
# Members carried over, or without effect on the answer (jobgate stores every response).
KNOWN = frozenset({
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools",
    "tool_choice", "parallel_tool_calls", "text", "reasoning", "user", "top_logprobs", "sim",
    "metadata", "store", "include", "truncation", "service_tier", "prompt_cache_key",
    "safety_identifier",
})  # fmt: skip


def to_chat(body: JSONObject) -> JSONObject:
    """The Chat Completions request for a Responses request; errors.InvalidRequest naming
    the parameter when something cannot be expressed."""
    inputs.refuse_unknown(body, KNOWN, target=TARGET)
    chat: JSONObject = {"model": body.get("model"), "messages": _messages(body)}
    for key in ("temperature", "top_p", "user", "sim"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_tokens"] = body["max_output_tokens"]
    tools = inputs.function_tools(body, target=TARGET)
    if tools:
        chat["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    top_logprobs = body.get("top_logprobs")
    if isinstance(top_logprobs, int) and top_logprobs > 0:
        chat["logprobs"] = True
        chat["top_logprobs"] = top_logprobs
    return chat


def _messages(body: JSONObject) -> list[JSONObject]:
    messages: list[JSONObject] = []
    for turn in inputs.turns(body, target=TARGET):
        if isinstance(turn, inputs.Message):
            messages.append({"role": turn.role, "content": _content(turn)})
        elif isinstance(turn, inputs.ToolCall):
            call = {
                "id": turn.call_id,
                "type": "function",
                "function": {"name": turn.name, "arguments": turn.arguments},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            messages.append({"role": "tool", "tool_call_id": turn.call_id, "content": turn.output})
    if not messages:
        raise errors.InvalidRequest("input holds no message", param="input")
    return messages


def _content(message: inputs.Message) -> str | list[JSONObject]:
    if all(isinstance(part, inputs.Text) for part in message.parts):
        return message.text  # a plain string: what every compatible server accepts
    parts: list[JSONObject] = []
    for part in message.parts:
        if isinstance(part, inputs.Text):
            parts.append({"type": "text", "text": part.text})
        else:
            image: JSONObject = {"url": part.url}
            if part.detail is not None:
                image["detail"] = part.detail
            parts.append({"type": "image_url", "image_url": image})
    return parts


def _tool(tool: JSONObject, where: str) -> JSONObject:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise errors.InvalidRequest(f"{where}.name is required", param=f"{where}.name")
    function: JSONObject = {"name": name}
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    raise inputs.unsupported("tool_choice", f"tool_choice {choice!r}", TARGET)


def _response_format(text: Any) -> JSONObject | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is None or kind == "text":
        return None
    assert isinstance(fmt, dict)
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise inputs.unsupported("text.format.type", f"format {kind!r}", TARGET)


# -- the answer -------------------------------------------------------------------------------


def from_chat(completion: JSONObject, *, request: JSONObject, job_id: str) -> JSONObject:
    """The Response for a `chat.completion` (the first choice)."""
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise errors.ProviderRetryable("the completion has no choices", code="bad_response")
    choice = choices[0]
    raw_message = choice.get("message")
    message: JSONObject = raw_message if isinstance(raw_message, dict) else {}
    finish_reason = choice.get("finish_reason")
    incomplete = {"length": "max_output_tokens", "content_filter": "content_filter"}
    reason = incomplete.get(finish_reason) if isinstance(finish_reason, str) else None
    status = "incomplete" if reason else "completed"
    suffix = job_id.removeprefix(f"{shapes.ID_PREFIX}_")
    output: list[JSONObject] = []
    thinking = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(thinking, str) and thinking:
        output.append(shapes.reasoning_item(f"rs_{suffix}", thinking))
    content, refusal = message.get("content"), message.get("refusal")
    tool_calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    parts: list[JSONObject] = []
    if isinstance(content, str) and (content or not tool_calls):
        parts.append(shapes.text_part(content))
    if isinstance(refusal, str) and refusal:
        parts.append(shapes.refusal_part(refusal))
    if parts or not tool_calls:
        output.append(shapes.message_item(f"msg_{suffix}", parts, status=status))
    for index, call in enumerate(tool_calls):
        raw_function = call.get("function")
        function: JSONObject = raw_function if isinstance(raw_function, dict) else {}
        output.append(
            shapes.function_call_item(
                f"fc_{suffix}_{index}",
                str(call.get("id") or f"call_{suffix}_{index}"),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
            )
        )
    usage = _usage(completion.get("usage"))
    created = completion.get("created")
    created_at = created if isinstance(created, int) else 0
    model = completion.get("model") if isinstance(completion.get("model"), str) else None
    body = shapes.skeleton(
        request, response_id=job_id, created_at=created_at, status=status, model=model
    )
    body.update(output=output, usage=usage, completed_at=created_at or None)
    if reason:
        body["incomplete_details"] = {"reason": reason}
    return body


def _usage(raw: Any) -> JSONObject:
    usage = raw if isinstance(raw, dict) else {}
    prompt = usage.get("prompt_tokens_details")
    prompt = prompt if isinstance(prompt, dict) else {}
    completion = usage.get("completion_tokens_details")
    completion = completion if isinstance(completion, dict) else {}
    return shapes.normalise_usage(
        {
            "input_tokens": usage.get("prompt_tokens"),
            "output_tokens": usage.get("completion_tokens"),
            "input_tokens_details": {"cached_tokens": prompt.get("cached_tokens")},
            "output_tokens_details": {"reasoning_tokens": completion.get("reasoning_tokens")},
            "total_tokens": usage.get("total_tokens"),
        }
    )
