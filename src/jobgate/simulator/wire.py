"""The simulated model's answers in the providers' published wire formats: OpenAI Responses
objects, Anthropic Messages (whole and as stream events), Message Batches, and both providers'
error bodies. (Chat Completions bodies live in `model`.) Tests validate every shape here
against the official `openai` and `anthropic` SDK types in strict mode.
"""

from __future__ import annotations

import itertools
import secrets
from datetime import UTC, datetime
from typing import Any

import orjson

from jobgate.simulator import model
from jobgate.wire import content

JSONObject = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


# -- errors -------------------------------------------------------------------------------

# fault -> (HTTP status, OpenAI error type, OpenAI code, Anthropic error type)
FAULT_STATUS: dict[str, tuple[int, str, str | None, str]] = {
    "rate_limit": (429, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error"),
    # OpenAI: 429 `insufficient_quota`; Anthropic: a 429 `rate_limit_error` about a spend limit
    "quota": (429, "insufficient_quota", "insufficient_quota", "rate_limit_error"),
    "server_error": (500, "server_error", "server_error", "api_error"),
    "overloaded": (529, "server_error", "overloaded", "overloaded_error"),
    "invalid_request": (400, "invalid_request_error", "invalid_value", "invalid_request_error"),
    "unauthorized": (401, "invalid_request_error", "invalid_api_key", "authentication_error"),
    "not_found": (404, "invalid_request_error", "not_found", "not_found_error"),
    "not_allowed": (405, "invalid_request_error", "method_not_allowed", "invalid_request_error"),
}


_FAULT_CODE: Any = object()  # `code`: the fault's own


def openai_error(
    fault: str, message: str, *, param: str | None = None, code: Any = _FAULT_CODE
) -> JSONObject:
    """OpenAI's error body for `fault`; `code` replaces the fault's (None: null)."""
    _, kind, fault_code, _ = FAULT_STATUS[fault]
    chosen = fault_code if code is _FAULT_CODE else code
    return {"error": {"message": message, "type": kind, "param": param, "code": chosen}}


def anthropic_error(fault: str, message: str) -> JSONObject:
    _, _, _, kind = FAULT_STATUS[fault]
    return {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": new_id("req_"),
    }


# -- tool calls ---------------------------------------------------------------------------


def planned_calls(body: JSONObject, count: int, prompt: str) -> list[tuple[str, JSONObject]]:
    """The `count` calls the simulated model makes after its text: the request's function
    tools in turn, each given the prompt as `{"input": prompt}`."""
    names = itertools.cycle(content.tool_names(body) or ["tool"])
    return [(next(names), {"input": prompt}) for _ in range(count)]


def arguments_text(arguments: JSONObject) -> str:
    return orjson.dumps(arguments).decode()


def with_chat_tool_calls(completion: JSONObject, body: JSONObject, count: int) -> JSONObject:
    """`completion` (a `chat.completion`) with `count` tool calls after its text, finishing
    with `tool_calls` as OpenAI's do."""
    if not count:
        return completion
    choice = completion["choices"][0]
    prompt = content.content_text(_last_user(body.get("messages")))
    suffix = completion["id"].removeprefix("chatcmpl-")
    calls = [
        {
            "id": f"call_{suffix}_{index}",
            "type": "function",
            "function": {"name": name, "arguments": arguments_text(arguments)},
        }
        for index, (name, arguments) in enumerate(planned_calls(body, count, prompt))
    ]
    message = {**choice["message"], "tool_calls": calls}
    return {
        **completion,
        "choices": [{**choice, "message": message, "finish_reason": "tool_calls"}],
    }


def _last_user(messages: Any) -> Any:
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return message.get("content")
    return None


# -- OpenAI Responses -----------------------------------------------------------------------


def responses_prompt(body: JSONObject) -> str:
    """The last user text of a Responses `input` (a string, or a list of input items)."""
    given = body.get("input")
    if isinstance(given, str):
        return given
    if isinstance(given, list):
        for item in reversed(given):
            if isinstance(item, dict) and item.get("role", "user") == "user":
                return content.content_text(item.get("content"))
    return ""


def _responses_input_tokens(body: JSONObject) -> int:
    given = body.get("input")
    if isinstance(given, str):
        return model.count_tokens(given)
    if isinstance(given, list):
        return sum(
            model.count_tokens(content.content_text(item.get("content")))
            for item in given
            if isinstance(item, dict)
        )
    return 0


def response_object(
    body: JSONObject,
    *,
    response_id: str,
    created_at: float,
    status: str,
    completed_at: float | None = None,
    background: bool = False,
    error_code: str = "server_error",
    tool_calls: int = 0,
) -> JSONObject:
    """An OpenAI `response` object for `body` as it stands in `status`.

    `completed` and `incomplete` carry output and usage; `failed` carries an error; `queued`,
    `in_progress` and `cancelled` carry neither (as OpenAI's background mode answers them).
    `tool_calls` function_call items follow the message (ids derived from the response's, so
    that every retrieve answers the same items).
    """
    output: list[JSONObject] = []
    usage = None
    error = None
    incomplete = None
    if status in ("completed", "incomplete"):
        prompt = responses_prompt(body)
        reply = model.continued(model.echo_reply(prompt), body.get("input"))
        if status == "incomplete":
            reply = reply[: max(1, len(reply) // 2)]
            incomplete = {"reason": "max_output_tokens"}
        suffix = response_id.removeprefix("resp_")
        output = [
            {
                "id": f"msg_{suffix}",
                "type": "message",
                "status": status,
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": reply, "annotations": [], "logprobs": []}
                ],
            }
        ]
        calls = planned_calls(body, tool_calls, prompt) if status == "completed" else []
        output += [
            {
                "id": f"fc_{suffix}_{index}",
                "type": "function_call",
                "status": "completed",
                "call_id": f"call_{suffix}_{index}",
                "name": name,
                "arguments": arguments_text(arguments),
            }
            for index, (name, arguments) in enumerate(calls)
        ]
        input_tokens = _responses_input_tokens(body)
        output_tokens = model.count_tokens(reply) + sum(
            model.count_tokens(item.get("arguments", "")) for item in output[1:]
        )
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
    elif status == "failed":
        error = {"code": error_code, "message": "the simulated model failed"}
    metadata = body.get("metadata")
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(created_at),
        "status": status,
        "background": background,
        "completed_at": None if completed_at is None else int(completed_at),
        "error": error,
        "incomplete_details": incomplete,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None,
        "model": body.get("model", "sim-echo"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": _response_tools(body),
        "top_logprobs": 0,
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": metadata if isinstance(metadata, dict) else {},
    }


def _response_tools(body: JSONObject) -> list[JSONObject]:
    """The function tools a Response echoes: as declared, with OpenAI's defaults filled in."""
    tools = body.get("tools")
    return [
        {"parameters": None, "strict": None, "description": None, **tool}
        for tool in (tools if isinstance(tools, list) else [])
        if isinstance(tool, dict) and tool.get("type") == "function"
    ]


def response_event(event_type: str, response_id: str, created_at: float) -> JSONObject:
    """An OpenAI webhook event (`response.completed`, ...) about one response."""
    return {
        "id": new_id("evt_"),
        "object": "event",
        "type": event_type,
        "created_at": int(created_at),
        "data": {"id": response_id},
    }


# -- Anthropic Messages ---------------------------------------------------------------------


def _anthropic_prompt(body: JSONObject) -> tuple[str, int]:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    prompt = ""
    for message in reversed(messages):
        if message.get("role") == "user":
            prompt = content.content_text(message.get("content"))
            break
    system = body.get("system")
    system_text = content.content_text(system) if system is not None else ""
    tokens = model.count_tokens(system_text) + sum(
        model.count_tokens(content.content_text(m.get("content"))) for m in messages
    )
    return prompt, tokens


def _anthropic_usage(input_tokens: int, output_tokens: int) -> JSONObject:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "service_tier": "standard",
    }


def anthropic_message(
    body: JSONObject, *, message_id: str | None = None, tool_calls: int = 0
) -> JSONObject:
    """A complete Anthropic `message` answering the last user turn; `tool_calls` tool_use
    blocks follow the text (stop reason `tool_use`)."""
    prompt, input_tokens = _anthropic_prompt(body)
    reply = model.continued(model.echo_reply(prompt), body.get("messages"))
    message_id = message_id or new_id("msg_")
    blocks: list[JSONObject] = [{"type": "text", "text": reply, "citations": None}]
    blocks += [
        {
            "type": "tool_use",
            "id": f"toolu_{message_id.removeprefix('msg_')}_{index}",
            "name": name,
            "input": arguments,
        }
        for index, (name, arguments) in enumerate(planned_calls(body, tool_calls, prompt))
    ]
    output_tokens = model.count_tokens(reply) + sum(
        model.count_tokens(arguments_text(block["input"])) for block in blocks[1:]
    )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "sim-echo"),
        "content": blocks,
        "stop_reason": "tool_use" if tool_calls else "end_turn",
        "stop_sequence": None,
        "usage": _anthropic_usage(input_tokens, output_tokens),
    }


def anthropic_stream_events(message: JSONObject, *, chunks: int = 4) -> list[JSONObject]:
    """The server-sent events that stream `message`: message_start, its text block in
    `chunks` deltas, each tool_use block as one `input_json_delta` of its input, message_delta
    (stop reason and output tokens), message_stop."""
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(message["usage"]["input_tokens"], 1),
    }
    events: list[JSONObject] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        opened, *rest = _block_events(index, block, chunks)
        events.append(opened)
        if index == 0:
            events.append({"type": "ping"})  # Anthropic's, after the first block opens
        events += rest
    events += [
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message["stop_reason"],
                "stop_sequence": message["stop_sequence"],
            },
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return events


def _block_events(index: int, block: JSONObject, chunks: int) -> list[JSONObject]:
    if block["type"] == "tool_use":
        opened = {**block, "input": {}}
        partial = arguments_text(block["input"])
        delta = {"type": "input_json_delta", "partial_json": partial}
        return [
            {"type": "content_block_start", "index": index, "content_block": opened},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    opened = {"type": "text", "text": "", "citations": None}
    return [
        {"type": "content_block_start", "index": index, "content_block": opened},
        *(
            {"type": "content_block_delta", "index": index, "delta": _text_delta(piece)}
            for piece in content.split_evenly(block.get("text", ""), chunks)
        ),
        {"type": "content_block_stop", "index": index},
    ]


def _text_delta(text: str) -> JSONObject:
    return {"type": "text_delta", "text": text}


# -- Anthropic Message Batches --------------------------------------------------------------


def rfc3339(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).isoformat().replace("+00:00", "Z")


def message_batch(
    *,
    batch_id: str,
    created_at: float,
    expires_at: float,
    processing_status: str,
    counts: dict[str, int],
    ended_at: float | None,
    cancel_initiated_at: float | None,
    results_url: str | None,
) -> JSONObject:
    """An Anthropic `message_batch` object (times as RFC 3339 strings)."""
    return {
        "id": batch_id,
        "type": "message_batch",
        "processing_status": processing_status,
        "request_counts": {
            key: counts.get(key, 0)
            for key in ("processing", "succeeded", "errored", "canceled", "expired")
        },
        "created_at": rfc3339(created_at),
        "expires_at": rfc3339(expires_at),
        "ended_at": None if ended_at is None else rfc3339(ended_at),
        "cancel_initiated_at": None
        if cancel_initiated_at is None
        else rfc3339(cancel_initiated_at),
        "archived_at": None,
        "results_url": results_url,
    }


def batch_result(custom_id: str, outcome: str, params: JSONObject) -> JSONObject:
    """One line of a batch's results file: succeeded (with the message), errored (a server
    error; `rejected`: an invalid request), canceled or expired."""
    if outcome == "succeeded":
        result: JSONObject = {"type": "succeeded", "message": anthropic_message(params)}
    elif outcome == "errored":
        result = {
            "type": "errored",
            "error": anthropic_error("server_error", "the simulated model failed"),
        }
    elif outcome == "rejected":
        result = {
            "type": "errored",
            "error": anthropic_error("invalid_request", "the simulated request is invalid"),
        }
    else:
        result = {"type": outcome}
    return {"custom_id": custom_id, "result": result}
