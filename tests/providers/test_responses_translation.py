"""/v1/responses on providers that do not speak Responses: the request translated to Chat
Completions or Anthropic Messages (valid under the official SDKs' request types), the answer
translated back into a Response that validates strictly, with exact usage; and the front that
chooses the wire, against the simulator server over real HTTP."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import openai._models
import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import Response, ResponseOutputMessage

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers import responses_front
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.base import ProviderCall
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.responses_front import ResponsesFront
from jobgate.providers.simulated import SimProvider
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock, ScriptedProvider, Succeed
from jobgate.wire import responses_chat, responses_messages
from tests.providers.sdk import request_matches

CONVERSATION: dict[str, Any] = {
    "model": "m-1",
    "instructions": "be brief",
    "input": [
        {"role": "developer", "content": "answer in English"},
        {"role": "user", "content": [{"type": "input_text", "text": "what is 2+2?"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "let me check", "annotations": []}],
        },
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 2}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "4"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "and this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            ],
        },
    ],
    "tools": [
        {
            "type": "function",
            "name": "add",
            "description": "adds",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
            "strict": True,
        }
    ],
    "tool_choice": "required",
    "parallel_tool_calls": False,
    "max_output_tokens": 300,
    "temperature": 0.5,
    "top_p": 0.9,
    "user": "u-1",
    "metadata": {"team": "a"},
}


def strict(payload: dict[str, Any]) -> Response:
    model = openai._models.validate_type(type_=Response, value=payload)
    assert not model.model_extra, model.model_extra
    return model


# -- Chat Completions -------------------------------------------------------------------------


def test_request_to_chat_completions() -> None:
    chat = responses_chat.to_chat(CONVERSATION)
    request_matches(completion_create_params.CompletionCreateParamsNonStreaming, chat)
    assert chat["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "answer in English"},
        {"role": "user", "content": "what is 2+2?"},
        {
            "role": "assistant",
            "content": "let me check",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "4"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
    ]
    assert chat["tools"][0]["function"]["name"] == "add"
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["max_tokens"] == 300 and chat["temperature"] == 0.5 and chat["user"] == "u-1"
    assert "metadata" not in chat


def test_chat_request_settings() -> None:
    chat = responses_chat.to_chat(
        {
            "model": "m",
            "input": "x",
            "tools": [{"type": "function", "name": "f"}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
            "reasoning": {"effort": "low"},
            "top_logprobs": 2,
        }
    )
    request_matches(completion_create_params.CompletionCreateParamsNonStreaming, chat)
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "s", "schema": {"type": "object"}},
    }
    assert chat["reasoning_effort"] == "low"
    assert chat["logprobs"] is True and chat["top_logprobs"] == 2
    assert responses_chat.to_chat(
        {"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}}
    )["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0]",
        ),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0]"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tool_choice": {"type": "mcp", "server_label": "x"}}, "tool_choice"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"max_tool_calls": 3}, "max_tool_calls"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input"),
    ],
)
def test_chat_refuses_what_it_cannot_express(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(errors.InvalidRequest) as raised:
        responses_chat.to_chat({"model": "m", "input": "x", **fields})
    assert raised.value.param == param


COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1_900_000_000,
    "model": "m-1-2030",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "four",
                "reasoning_content": "2+2=4",
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 2}'},
                    }
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 120,
        "completion_tokens": 30,
        "total_tokens": 150,
        "prompt_tokens_details": {"cached_tokens": 100},
        "completion_tokens_details": {"reasoning_tokens": 12},
    },
}


def test_completion_to_response_with_exact_usage() -> None:
    result = responses_front.chat_result(
        COMPLETION, request=CONVERSATION, job_id="resp_01x", provider_request_id="chatcmpl-1"
    )
    response = strict(result.body)
    assert response.id == "resp_01x" and response.status == "completed"
    assert response.model == "m-1-2030" and response.instructions == "be brief"
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    assert response.output_text == "four"
    call = response.output[2]
    assert call.type == "function_call" and call.call_id == "call_9" and call.name == "add"
    assert response.usage is not None
    assert response.usage.input_tokens == 120 and response.usage.output_tokens == 30
    assert response.usage.input_tokens_details.cached_tokens == 100
    assert response.usage.output_tokens_details.reasoning_tokens == 12
    assert response.usage.total_tokens == 150
    assert (result.usage.input_tokens, result.usage.output_tokens) == (120, 30)
    assert result.provider_request_id == "chatcmpl-1"


async def test_cached_tokens_of_a_translated_completion_reach_the_ledger() -> None:
    """The ledger prices what the job's Usage says: a completion's cached prompt tokens are
    cache reads there too, not only in the Response's `usage`."""
    completion = {**COMPLETION, "usage": {**COMPLETION["usage"], "prompt_tokens": 2000,
                  "prompt_tokens_details": {"cached_tokens": 1920}}}  # fmt: skip
    scripted = ScriptedProvider("scripted")
    scripted.script.append(Succeed(body=completion))
    front = ResponsesFront(scripted, "chat_completions")
    result = await front.call(call({"model": "m", "input": "x"}))
    assert strict(result.body).usage.input_tokens_details.cached_tokens == 1920  # type: ignore[union-attr]
    assert result.usage.input_tokens == 2000
    assert result.usage.cache_read_input_tokens == 1920
    assert result.usage.as_dict()["cache_read_input_tokens"] == 1920


@pytest.mark.parametrize(
    ("finish_reason", "reason"),
    [("length", "max_output_tokens"), ("content_filter", "content_filter")],
)
def test_completion_cut_short_is_incomplete(finish_reason: str, reason: str) -> None:
    completion = {
        **COMPLETION,
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", "content": "fo"},
            }
        ],
    }
    response = strict(
        responses_chat.from_chat(
            completion,
            request={"model": "m", "input": "x"},
            job_id="resp_1",
        )
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == reason
    assert response.output[0].status == "incomplete"  # type: ignore[union-attr]


def test_completion_with_a_refusal_and_without_choices() -> None:
    refused = {
        **COMPLETION,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": None, "refusal": "no"},
            }
        ],
    }
    response = strict(responses_chat.from_chat(refused, request={}, job_id="resp_1"))
    message = response.output[0]
    assert isinstance(message, ResponseOutputMessage)
    assert message.content[0].type == "refusal"
    with pytest.raises(errors.ProviderRetryable):
        responses_chat.from_chat({**COMPLETION, "choices": []}, request={}, job_id="resp_1")


# -- Anthropic Messages -----------------------------------------------------------------------


def test_request_to_messages() -> None:
    body = responses_messages.to_messages(CONVERSATION, output_bound=128_000)
    request_matches(message_create_params.MessageCreateParamsNonStreaming, body)
    assert body["system"] == "be brief\n\nanswer in English"
    assert body["max_tokens"] == 300
    assert "temperature" not in body and "top_p" not in body  # Messages takes neither now
    assert body["metadata"] == {"user_id": "u-1"}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what is 2+2?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "let me check"},
                {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 2}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "4"},
                {"type": "text", "text": "and this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "add",
            "description": "adds",
            "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}}},
        }
    ]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


def test_messages_defaults_and_refusals() -> None:
    plain = responses_messages.to_messages({"model": "claude", "input": "hi"}, output_bound=9000)
    assert plain["max_tokens"] == 9000  # an unknown model: the provider's bound
    assert plain["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    url = responses_messages.to_messages(
        output_bound=128_000,
        body={
            "model": "c",
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": "https://x/i.png"}],
                }
            ],
        },
    )
    assert url["messages"][0]["content"][0]["source"] == {"type": "url", "url": "https://x/i.png"}
    structured = responses_messages.to_messages(
        output_bound=128_000,
        body={
            "model": "c",
            "input": "x",
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
            "reasoning": {"effort": "minimal"},
        },
    )
    request_matches(message_create_params.MessageCreateParamsNonStreaming, structured)
    assert structured["output_config"] == {
        "format": {"type": "json_schema", "schema": {"type": "object"}},
        "effort": "low",
    }
    cases: list[tuple[dict[str, Any], str]] = [
        ({"text": {"format": {"type": "json_object"}}}, "text.format"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"input": [{"role": "system", "content": "only rules"}]}, "input"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
            "input",
        ),
    ]
    for fields, param in cases:
        with pytest.raises(errors.InvalidRequest) as raised:
            responses_messages.to_messages(
                {"model": "c", "input": "x", **fields}, output_bound=128_000
            )
        assert raised.value.param == param, fields


@pytest.mark.parametrize(
    ("model", "asked", "bound", "sent"),
    [
        ("claude-sonnet-4-5-20250929", None, 128_000, 64_000),
        ("claude-opus-4-1-20250805", None, 128_000, 32_000),
        ("claude-opus-4-6", None, 128_000, 128_000),
        ("claude-3-5-haiku-latest", None, 128_000, 8_192),
        ("claude-3-haiku-20240307", None, 128_000, 4_096),
        ("claude-sonnet-4-5", None, 1_000, 1_000),  # the operator's bound is lower
        ("claude-sonnet-4-5", 300, 128_000, 300),  # the request's own
        ("claude-future-9", None, 50_000, 50_000),  # unknown: the provider's bound
    ],
)
def test_messages_max_tokens_is_the_requests_or_the_models_limit(
    model: str, asked: int | None, bound: int, sent: int
) -> None:
    """Messages requires `max_tokens`; Responses does not. Without `max_output_tokens` the
    answer may be as long as the model allows (Anthropic's limit per model, within the
    provider's configured bound), never cut at an arbitrary 4096."""
    body: dict[str, Any] = {"model": model, "input": "hi"}
    if asked is not None:
        body["max_output_tokens"] = asked
    assert responses_messages.to_messages(body, output_bound=bound)["max_tokens"] == sent


def test_the_registry_front_sizes_max_tokens_from_the_provider_config() -> None:
    config = ProviderConfig(
        kind="anthropic",
        base_url="http://127.0.0.1:9",
        max_output_tokens=20_000,
        model_limits={"claude-small": {"max_output_tokens": 2_000}},
    )
    registry = ProviderRegistry(
        {"claude": AnthropicProvider("claude", config)},
        configs={"claude": config},
        default="claude",
    )
    front = registry.get("claude", api="responses")
    assert isinstance(front, ResponsesFront)
    for model, sent in (("claude-small", 2_000), ("claude-sonnet-4-5", 20_000)):
        _, body = front.translate({"model": model, "input": "hi"})
        assert body["max_tokens"] == sent


MESSAGE: dict[str, Any] = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sim-2030",
    "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "four", "citations": None},
        {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 20,
        "output_tokens": 9,
        "cache_creation_input_tokens": 50,
        "cache_read_input_tokens": 300,
    },
}


def test_message_to_response_counts_cache_tokens_like_openai() -> None:
    result = responses_front.message_result(
        MESSAGE,
        request={"model": "claude", "input": "x"},
        job_id="resp_2",
        created_at=1_900_000_000,
    )
    response = strict(result.body)
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]
    assert response.output_text == "four"
    call = response.output[2]
    assert (
        call.type == "function_call" and call.arguments == '{"a":2}' and call.call_id == "toolu_1"
    )
    assert response.usage is not None
    assert response.usage.input_tokens == 370  # 20 uncached + 50 written + 300 read
    assert response.usage.input_tokens_details.cached_tokens == 300
    assert response.usage.input_tokens_details.cache_write_tokens == 50
    assert response.usage.output_tokens == 9 and response.usage.total_tokens == 379
    assert (result.usage.input_tokens, result.usage.output_tokens) == (370, 9)
    assert result.provider_request_id == "msg_01"


@pytest.mark.parametrize(
    ("stop_reason", "reason"), [("max_tokens", "max_output_tokens"), ("refusal", "content_filter")]
)
def test_message_cut_short_is_incomplete(stop_reason: str, reason: str) -> None:
    message = {**MESSAGE, "stop_reason": stop_reason, "content": []}
    response = strict(
        responses_messages.from_message(message, request={}, job_id="resp_1", created_at=1)
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == reason
    assert response.output_text == ""


# -- the front --------------------------------------------------------------------------------


def call(body: dict[str, Any], job_id: str = "resp_01abc") -> ProviderCall:
    return ProviderCall(
        job_id=job_id,
        tenant_id="ten_1",
        endpoint="/v1/responses",
        body=body,
        model=body.get("model"),
        attempt=1,
        run_count=1,
        idempotency_key=job_id,
    )


def test_registry_gives_responses_jobs_the_front_with_the_configured_wire() -> None:
    scripted = ScriptedProvider("scripted")
    registry = ProviderRegistry(
        {"sim": SimProvider("sim"), "chat": SimProvider("chat"), "scripted": scripted},
        configs={
            "sim": ProviderConfig(kind="sim"),
            "chat": ProviderConfig(kind="sim", responses_api="chat_completions"),
            "scripted": ProviderConfig(kind="sim"),
        },
        default="sim",
    )
    assert registry.get("sim") is not registry.get("sim", api="responses")
    front = registry.get("chat", api="responses")
    assert isinstance(front, ResponsesFront) and front.wire == "chat_completions"
    assert registry.get("chat", api="responses") is front  # one front per provider
    provider, model = registry.route(None, "scripted/anything", api="responses")
    assert isinstance(provider, ResponsesFront) and provider.inner is scripted
    assert model == "anything"


async def test_native_front_leaves_jobgate_members_out() -> None:
    scripted = ScriptedProvider("scripted")
    front = ResponsesFront(scripted, "native")
    front.validate("/v1/responses", {"model": "m", "input": "x", "background": True})
    await front.call(call({"model": "m", "input": "x", "background": True, "include": ["a"]}))
    assert scripted.calls[0].body == {"model": "m", "input": "x", "include": ["a"]}
    assert scripted.calls[0].endpoint == "/v1/responses"
    assert not front.runs_in_background("/v1/responses")  # scripted has no background mode


async def test_chat_front_on_the_sim_provider() -> None:
    front = ResponsesFront(SimProvider("sim", clock=FakeClock()), "chat_completions")
    body = {"model": "sim-echo", "input": "over chat", "background": True, "max_output_tokens": 50}
    front.validate("/v1/responses", body)
    result = await front.call(call(body))
    response = strict(result.body)
    assert response.output_text == "echo: over chat"
    assert response.background is True and response.max_output_tokens == 50
    assert response.usage is not None
    assert result.usage.input_tokens == response.usage.input_tokens > 0
    assert not front.runs_in_background("/v1/responses")


def test_translated_request_refused_by_the_provider_says_so() -> None:
    front = ResponsesFront(SimProvider("sim"), "chat_completions")
    with pytest.raises(errors.InvalidRequest) as raised:
        front.validate("/v1/responses", {"model": "", "input": "x"})
    assert "translated from this one" in raised.value.message


@pytest.fixture
async def chat_only() -> AsyncIterator[Simulator]:
    async with Simulator(responses_api=False) as simulator:
        yield simulator


async def test_chat_front_over_a_server_without_a_responses_api(chat_only: Simulator) -> None:
    inner = OpenAIProvider(
        "upstream",
        ProviderConfig(
            kind="openai", base_url=chat_only.openai_base_url, responses_api="chat_completions"
        ),
    )
    front = ResponsesFront(inner, "chat_completions")
    try:
        body = {"model": "gpt-x", "input": "hello upstream", "sim": {"latency_s": 0.01}}
        front.validate("/v1/responses", body)
        result = await front.call(call(body))
        assert strict(result.body).output_text == "echo: hello upstream"
        native = ResponsesFront(inner, "native")
        with pytest.raises(errors.ProviderFatal) as refused:  # the server has no /responses
            await native.call(call(body, job_id="resp_02"))
        assert refused.value.status_code == 404
    finally:
        await inner.aclose()
    paths = [(r.method, r.path) for r in chat_only.engine.requests]
    assert paths == [("POST", "/v1/chat/completions"), ("POST", "/v1/responses")]
    sent = chat_only.engine.requests[0]
    assert sent.headers["idempotency-key"] == "resp_01abc"
    assert sent.body is not None and "sim" not in sent.body
    request_matches(completion_create_params.CompletionCreateParamsNonStreaming, sent.body)


async def test_messages_front_over_the_simulator(simulator: Simulator) -> None:
    inner = AnthropicProvider(
        "claude", ProviderConfig(kind="anthropic", base_url=simulator.anthropic_base_url)
    )
    front = ResponsesFront(inner, "messages", clock=FakeClock())
    try:
        body = {"model": "claude-sim", "input": "hello claude", "instructions": "be kind"}
        front.validate("/v1/responses", body)
        result = await front.call(call(body))
    finally:
        await inner.aclose()
    response = strict(result.body)
    assert response.output_text == "echo: hello claude" and response.instructions == "be kind"
    assert response.usage is not None and response.usage.input_tokens == result.usage.input_tokens
    (sent,) = simulator.engine.requests
    assert sent.path == "/v1/messages" and sent.body is not None
    assert sent.body["system"] == "be kind" and sent.body["stream"] is True
    sent_params = {k: v for k, v in sent.body.items() if k != "stream"}
    request_matches(message_create_params.MessageCreateParamsNonStreaming, sent_params)


def test_front_forwards_background_mode_only_natively() -> None:
    sim = SimProvider("sim", background=True)
    assert ResponsesFront(sim, "native").runs_in_background("/v1/responses")
    assert not ResponsesFront(sim, "chat_completions").runs_in_background("/v1/responses")
    assert dataclasses.is_dataclass(call({}))
