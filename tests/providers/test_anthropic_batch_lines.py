"""Caller's OpenAI-format batch lines as Anthropic Message Batches requests and back: the
requests are valid for the `anthropic` SDK's create params (strict), the results come back as
the caller's output and error lines (bodies valid for the `openai` SDK's types, strict), each
line once, in the part's order, whatever the results file's order."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from anthropic.types.messages import batch_create_params
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from jobgate import errors
from jobgate.domain.provider_batches import part_key
from jobgate.providers import anthropic_batch_lines as lines
from jobgate.providers.base import anthropic_usage
from jobgate.simulator import profiles
from jobgate.simulator.anthropic_batches import MessageBatches
from jobgate.wire import anthropic_batch_results as ids
from jobgate.wire import anthropic_batches, sim
from tests.providers.sdk import openai_strict, request_matches

KEY = part_key("batch_7", "claude", 0)
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}


def chat_line(custom_id: str, text: str = "hello", **body: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": text}]
    chat = {"model": "claude-sim", "messages": messages, "max_completion_tokens": 64, **body}
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": chat}


def responses_line(custom_id: str, text: str = "hello", **body: Any) -> dict[str, Any]:
    request = {"model": "claude-sim", "input": text, **body}
    return {"custom_id": custom_id, "method": "POST", "url": RESPONSES, "body": request}


def sent(line: dict[str, Any], index: int = 0) -> dict[str, Any]:
    request = anthropic_batches.to_request(
        line, custom_id=ids.request_custom_id(KEY, index), output_bound=4096
    )
    params = {k: v for k, v in request["params"].items() if k != "sim"}
    request_matches(MessageCreateParamsNonStreaming, params)
    request_matches(batch_create_params.Request, {**request, "params": params})
    return request


def test_a_whole_chat_conversation_becomes_messages_params() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is in this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"word": "png"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "an image format"},
    ]  # fmt: skip
    body = {
        "model": "claude-sim",
        "messages": messages,
        "max_completion_tokens": 100,
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "parallel_tool_calls": False,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
        "reasoning_effort": "low",
        "user": "u-1",
    }
    line = {"custom_id": "anything at all / 512 chars", "method": "POST", "url": CHAT, "body": body}
    request = sent(line)
    params = request["params"]
    assert ids.line_index(KEY, request["custom_id"]) == 0
    assert params["system"] == "Be brief." and params["max_tokens"] == 100
    assert [m["role"] for m in params["messages"]] == ["user", "assistant", "user"]
    assert params["messages"][1]["content"][0]["type"] == "tool_use"
    assert params["messages"][2]["content"][0] == {
        "type": "tool_result", "tool_use_id": "call_1", "content": "an image format",
    }  # fmt: skip
    assert params["tool_choice"] == {
        "type": "tool", "name": "lookup", "disable_parallel_tool_use": True,
    }  # fmt: skip
    assert params["tools"][0]["input_schema"]["properties"] == {"word": {"type": "string"}}
    assert params["output_config"] == {
        "format": {"type": "json_schema", "schema": {}},
        "effort": "low",
    }
    assert params["metadata"] == {"user_id": "u-1"}


def test_a_responses_line_and_a_lines_sim_travel() -> None:
    request = sent(responses_line("r", instructions="Be brief.", sim={"outcome": "failed"}), 3)
    assert request["params"]["system"] == "Be brief."
    assert request["params"]["sim"] == {"outcome": "failed"}
    assert ids.line_index(KEY, request["custom_id"]) == 3
    unbounded = sent(chat_line("c", max_completion_tokens=None, n=1, stream=False))
    assert unbounded["params"]["max_tokens"] == 4096  # the provider's bound


@pytest.mark.parametrize(
    ("line", "param"),
    [
        (chat_line("a", n=2), "n"),
        (chat_line("a", stop=["x"]), "stop"),
        (chat_line("a", response_format={"type": "json_object"}), "response_format"),
        (chat_line("a", stream=True), "stream"),
        ({"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}, "url"),
        ({**chat_line("a"), "body": {"model": "m", "messages": []}}, "messages"),
    ],
)
def test_what_anthropic_cannot_be_asked_is_refused_by_name(line: Any, param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as refused:
        anthropic_batches.to_request(line, custom_id="x", output_bound=10)
    assert refused.value.param == param


def test_results_come_back_as_the_callers_lines_each_once_in_order() -> None:
    now = [1_000.0]
    state = MessageBatches(lambda: now[0], profiles.profile())
    part = [
        chat_line("caller one: any text", "first", sim={"latency_s": 5}),
        responses_line("two", "second", sim={"latency_s": 1}),
        chat_line("three", "third", tools=[TOOL], sim={"latency_s": 2, "tool_calls": 1}),
        chat_line("four", sim={"latency_s": 1, "outcome": "failed"}),
        chat_line("five", sim={"latency_s": 1, "outcome": "rejected"}),
        chat_line("six", sim={"outcome": "never"}),
        chat_line("seven"),  # the file will lack it
    ]
    requests = [sent(line, index) for index, line in enumerate(part)]
    batch_id = state.create(
        {"requests": requests}, sim.Directives(expires_after_s=10), body_bytes=1
    )
    now[0] += 10
    results = state.results(batch_id)
    results = [r for r in results if not r["custom_id"].endswith("-6")]  # seven: lost
    data = b"\n".join(orjson.dumps(r) for r in results)
    back = lines.lines_back(
        part, part_key=KEY, provider_batch_id=batch_id, results=data, created_at=1_000
    )
    assert [r.custom_id for r in back] == [line["custom_id"] for line in part]
    assert [r.succeeded for r in back] == [True, True, True, False, False, False, False]
    first = openai_strict(ChatCompletion, back[0].line["response"]["body"])
    assert first.choices[0].message.content == "echo: first"
    assert back[0].line["response"]["status_code"] == 200 and back[0].line["error"] is None
    assert back[0].usage is not None and back[0].usage.output_tokens > 0
    second = openai_strict(Response, back[1].line["response"]["body"])
    assert second.output_text == "echo: second" and second.status == "completed"
    third = openai_strict(ChatCompletion, back[2].line["response"]["body"])
    assert third.choices[0].finish_reason == "tool_calls"
    (call,) = third.choices[0].message.tool_calls or []
    assert call.type == "function" and call.function.name == "lookup"
    assert orjson.loads(call.function.arguments) is not None
    assert back[3].line["response"]["status_code"] == 500
    assert back[3].line["response"]["body"]["error"]["type"] == "api_error"
    assert back[4].line["response"]["status_code"] == 400
    assert back[4].line["response"]["body"]["error"]["type"] == "invalid_request_error"
    assert back[5].line["error"]["code"] == "batch_expired" and back[5].line["response"] is None
    assert back[6].line["error"]["code"] == "batch_line_missing"
    assert len({r.line["id"] for r in back}) == len(part)


def test_canceled_requests_come_back_as_cancelled_lines() -> None:
    line = chat_line("c")
    result = {"type": "canceled"}
    back = lines.line_back(line, result, line_id="batch_req_x_0", created_at=0)
    assert back.line["error"]["code"] == "batch_cancelled" and not back.succeeded
    bare = {"type": "errored", "error": {"type": "overloaded_error", "message": "busy"}}
    overloaded = lines.line_back(line, bare, line_id="batch_req_x_1", created_at=0)
    assert overloaded.line["response"]["status_code"] == 529
    odd = lines.line_back(line, {"type": "succeeded"}, line_id="batch_req_x_2", created_at=0)
    assert odd.line["error"]["code"] == "batch_line_missing"


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 7, "output_tokens": 3},
        {"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": 5},
        {"input_tokens": 7, "cache_creation_input_tokens": 11, "cache_read_input_tokens": 2},
        {"input_tokens": -4, "output_tokens": True, "cache_read_input_tokens": "9"},
        None,
    ],
)
def test_a_chat_completion_counts_the_tokens_the_ledger_prices(usage: Any) -> None:
    message = {"id": "msg_1", "model": "claude", "content": [], "usage": usage}
    result = {"type": "succeeded", "message": message}
    back = lines.line_back(chat_line("u"), result, line_id="batch_req_x_0", created_at=0)
    shown = back.line["response"]["body"]["usage"]
    priced = anthropic_usage(usage)
    assert (shown["prompt_tokens"], shown["completion_tokens"]) == (
        priced.input_tokens,
        priced.output_tokens,
    )
    assert shown["prompt_tokens_details"]["cached_tokens"] == priced.cache_read_input_tokens
