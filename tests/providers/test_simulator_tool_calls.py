"""`sim.tool_calls`: the simulated model answers text followed by calls to the request's
function tools, whole and streamed, in each provider's wire, as the official SDKs (strict mode)
assemble them from the stream; a request that declares no function tool is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from jobgate import errors
from jobgate.providers.base import ProviderCall
from jobgate.providers.simulated import SimProvider
from jobgate.simulator.server import Simulator
from tests.providers.sdk import anthropic_strict, openai_strict

pytestmark = pytest.mark.asyncio
PROMPT = "what is the weather"
CHAT_TOOL: Any = {"type": "function", "function": {"name": "weather", "parameters": {}}}
RESPONSES_TOOLS: Any = [
    {"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": False},
    {"type": "function", "name": "clock", "parameters": {"type": "object"}, "strict": False},
]
CLAUDE_TOOL: Any = {"name": "weather", "input_schema": {"type": "object"}}


def sim(**directives: object) -> dict[str, str]:
    return {"x-jobgate-sim": orjson.dumps(directives).decode()}


@pytest.fixture
async def oai(simulator: Simulator) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=simulator.openai_base_url,
        api_key="sk-test",
        max_retries=0,
        _strict_response_validation=True,
    ) as client:
        yield client


@pytest.fixture
async def claude(simulator: Simulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=simulator.anthropic_base_url,
        api_key="sk-ant-test",
        max_retries=0,
        _strict_response_validation=True,
    ) as client:
        yield client


async def _events(simulator: Simulator, path: str, body: dict[str, Any]) -> list[Any]:
    headers = {"anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        answer = await client.post(path, json=body, headers=headers)
    return [
        orjson.loads(line.removeprefix("data: "))
        for line in answer.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


async def test_chat_completions_text_then_a_tool_call(
    simulator: Simulator, oai: openai.AsyncOpenAI
) -> None:
    messages: Any = [{"role": "user", "content": PROMPT}]
    whole = await oai.chat.completions.create(
        model="m", messages=messages, tools=[CHAT_TOOL], extra_headers=sim(tool_calls=1)
    )
    async with oai.chat.completions.stream(
        model="m", messages=messages, tools=[CHAT_TOOL], extra_headers=sim(tool_calls=1)
    ) as stream:
        streamed = await stream.get_final_completion()
    for answer in (whole, streamed):
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content == f"echo: {PROMPT}"
        [call] = choice.message.tool_calls or []
        assert call.function.name == "weather"  # type: ignore[union-attr]
        assert orjson.loads(call.function.arguments) == {"input": PROMPT}  # type: ignore[union-attr]
    body = {"model": "m", "messages": messages, "tools": [CHAT_TOOL], "stream": True,
            "sim": {"tool_calls": 1}}  # fmt: skip
    for event in await _events(simulator, "/v1/chat/completions", body):
        openai_strict(ChatCompletionChunk, event)
    openai_strict(ChatCompletion, whole.model_dump(mode="json", exclude_unset=True))


async def test_responses_text_then_tool_calls(
    simulator: Simulator, oai: openai.AsyncOpenAI
) -> None:
    whole = await oai.responses.create(
        model="m", input=PROMPT, tools=RESPONSES_TOOLS, extra_headers=sim(tool_calls=2)
    )
    async with oai.responses.stream(
        model="m", input=PROMPT, tools=RESPONSES_TOOLS, extra_headers=sim(tool_calls=2)
    ) as stream:
        kinds = [event.type async for event in stream]
        streamed = await stream.get_final_response()
    for answer in (whole, streamed):
        assert [item.type for item in answer.output] == [
            "message",
            "function_call",
            "function_call",
        ]
        assert answer.output_text == f"echo: {PROMPT}"
        calls = answer.output[1:]
        assert [call.name for call in calls] == ["weather", "clock"]  # type: ignore[union-attr]
    assert kinds.count("response.function_call_arguments.delta") == 2
    assert kinds.count("response.function_call_arguments.done") == 2
    assert kinds.count("response.output_item.added") == 3
    body = {"model": "m", "input": PROMPT, "tools": RESPONSES_TOOLS, "stream": True,
            "sim": {"tool_calls": 2}}  # fmt: skip
    events = await _events(simulator, "/v1/responses", body)
    for event in events:
        openai_strict(ResponseStreamEvent, event)  # type: ignore[arg-type]
    final = openai_strict(Response, events[-1]["response"])
    added = {
        e["item"]["id"]: e["output_index"]
        for e in events
        if e["type"] == "response.output_item.added"
    }
    assert added == {item.id: index for index, item in enumerate(final.output)}


async def test_anthropic_text_then_a_tool_use(
    simulator: Simulator, claude: anthropic.AsyncAnthropic
) -> None:
    messages: Any = [{"role": "user", "content": PROMPT}]
    whole = await claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=messages,
        tools=[CLAUDE_TOOL],
        extra_headers=sim(tool_calls=1),
    )
    async with claude.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=messages,
        tools=[CLAUDE_TOOL],
        extra_headers=sim(tool_calls=1),
    ) as stream:
        streamed = await stream.get_final_message()
    for answer in (whole, streamed):
        assert answer.stop_reason == "tool_use"
        text, call = answer.content
        assert text.type == "text" and text.text == f"echo: {PROMPT}"
        assert call.type == "tool_use" and call.name == "weather"
        assert call.input == {"input": PROMPT}
    anthropic_strict(Message, whole.model_dump(mode="json", exclude_unset=True))
    body = {"model": "c", "max_tokens": 10, "messages": messages, "tools": [CLAUDE_TOOL],
            "stream": True, "sim": {"tool_calls": 1}}  # fmt: skip
    for event in await _events(simulator, "/v1/messages", body):
        if event["type"] != "ping":
            anthropic_strict(RawMessageStreamEvent, event)  # type: ignore[arg-type]


async def test_tool_calls_without_a_function_tool_are_refused(
    oai: openai.AsyncOpenAI, claude: anthropic.AsyncAnthropic
) -> None:
    with pytest.raises(openai.BadRequestError):
        await oai.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], extra_headers=sim(tool_calls=1)
        )
    with pytest.raises(openai.BadRequestError):
        await oai.responses.create(model="m", input="x", extra_headers=sim(tool_calls=1))
    with pytest.raises(anthropic.BadRequestError):
        await claude.messages.create(
            model="c",
            max_tokens=10,
            messages=[{"role": "user", "content": "x"}],
            extra_headers=sim(tool_calls=1),
        )


def _call(endpoint: str, body: dict[str, Any]) -> ProviderCall:
    return ProviderCall(
        job_id="job_1",
        tenant_id="t",
        endpoint=endpoint,
        body=body,
        model="sim-echo",
        attempt=1,
        run_count=1,
        idempotency_key="job_1",
    )


async def test_the_in_process_provider_calls_tools_after_its_text() -> None:
    provider = SimProvider()
    chat = {"model": "sim-echo", "messages": [{"role": "user", "content": PROMPT}],
            "tools": [CHAT_TOOL], "sim": {"tool_calls": 1}}  # fmt: skip
    provider.validate("/v1/chat/completions", chat)
    answer = await provider.call(_call("/v1/chat/completions", chat))
    message = openai_strict(ChatCompletion, answer.body).choices[0].message
    assert message.content == f"echo: {PROMPT}" and len(message.tool_calls or []) == 1
    responses = {"model": "sim-echo", "input": PROMPT, "tools": RESPONSES_TOOLS,
                 "sim": {"tool_calls": 1}}  # fmt: skip
    answer = await provider.call(_call("/v1/responses", responses))
    output = openai_strict(Response, answer.body).output
    assert [item.type for item in output] == ["message", "function_call"]
    with pytest.raises(errors.InvalidRequest) as refused:
        provider.validate("/v1/responses", {**responses, "tools": []})
    assert refused.value.param == "body.sim.tool_calls"
