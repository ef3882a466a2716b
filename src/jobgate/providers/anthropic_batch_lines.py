"""A caller's OpenAI-format batch line's result in an Anthropic Message Batch, read back as the
caller's output or error line with the usage the ledger prices (the line going out is
wire.anthropic_batches).

Back: a `succeeded` result becomes a 200 whose body is a `chat.completion` or a `response`, as
the caller's endpoint answers; `errored` becomes the provider's status and an OpenAI-shaped
error body; `canceled` and `expired` (and a line the results file lacks) become error lines
with the codes jobgate's own batches use. Every line of the part comes back once, in order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jobgate.providers.base import JSONObject, Usage, anthropic_usage
from jobgate.wire import anthropic_batch_results as ids
from jobgate.wire import openai_batches as batches
from jobgate.wire import responses_messages, responses_objects

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


# -- the results ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class LineResult:
    custom_id: str  # the caller's
    line: dict[str, Any]  # the output or error file's line, as the caller reads it
    succeeded: bool
    usage: Usage | None  # what a succeeded line used (priced at the batch rate)


def lines_back(
    lines: Sequence[Mapping[str, Any]],
    *,
    part_key: str,
    provider_batch_id: str,
    results: bytes,
    created_at: int,
) -> list[LineResult]:
    """The part's `lines` (the caller's, in the part's order) as the ended batch's `results`
    file (JSONL) left them: each once, in order."""
    found = ids.results_by_line(part_key, len(lines), results)
    return [
        line_back(
            line, result, line_id=f"batch_req_{provider_batch_id}_{index}", created_at=created_at
        )
        for index, (line, result) in enumerate(zip(lines, found, strict=True))
    ]


def line_back(
    line: Mapping[str, Any], result: Mapping[str, Any] | None, *, line_id: str, created_at: int
) -> LineResult:
    """One caller's line and the result Anthropic gave it (None: none was given)."""
    custom_id = str(line.get("custom_id"))
    kind = result.get("type") if result is not None else "missing"
    if kind == "succeeded":
        assert result is not None
        message = result.get("message")
        if isinstance(message, dict):
            body = _answer(line, message, created_at)
            output = batches.output_line(
                line_id=line_id,
                custom_id=custom_id,
                job_id=str(message.get("id") or line_id),
                status_code=200,
                body=body,
            )
            return LineResult(custom_id, output, True, anthropic_usage(message.get("usage")))
        kind = "missing"
    if kind == "errored":
        assert result is not None
        status, body = _error(result.get("error"))
        output = batches.output_line(
            line_id=line_id, custom_id=custom_id, job_id=line_id, status_code=status, body=body
        )
        return LineResult(custom_id, output, False, None)
    code, message_text = NOT_RUN.get(str(kind), NOT_RUN["missing"])
    output = batches.error_line(
        line_id=line_id, custom_id=custom_id, code=code, message=message_text
    )
    return LineResult(custom_id, output, False, None)


def _answer(line: Mapping[str, Any], message: JSONObject, created_at: int) -> JSONObject:
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
    usage = anthropic_usage(message.get("usage"))
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
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
            "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
        },
    }


def _error(raw: Any) -> tuple[int, JSONObject]:
    """An errored result's error (`{"type": "error", "error": {"type", "message"}}`) as the
    status and OpenAI-shaped body the caller's error line carries."""
    inner = raw.get("error") if isinstance(raw, dict) else None
    error = inner if isinstance(inner, dict) else raw if isinstance(raw, dict) else {}
    kind = error.get("type") if isinstance(error.get("type"), str) else "api_error"
    message = error.get("message") if isinstance(error.get("message"), str) else kind
    status = ERROR_STATUS.get(str(kind), 500)
    body = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return status, body
