"""Multi-turn responses through the official `openai` SDK in strict mode against a real jobgate
HTTP server whose providers are the simulator's HTTP server (which records every request it
receives): three turns through `previous_response_id` and three through `conversation` give
the upstream the whole context on each turn, tool calls and their outputs included, for a
provider that speaks the Responses API, one that speaks Chat Completions and one that speaks
Anthropic Messages; on both backends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from openai.types.conversations import Conversation
from openai.types.responses import Response

from jobgate.config import ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.simulator.server import Simulator
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, SequentialIds
from tests.api_server import Api

pytestmark = pytest.mark.asyncio
# model → (the path the upstream receives it on, where that body holds the turns)
FLAVOURS = {
    "native/m": ("/v1/responses", "input"),
    "chat/m": ("/v1/chat/completions", "messages"),
    "claude/claude-sonnet-4-5": ("/v1/messages", "messages"),
}
TOOLS: Any = [
    {
        "type": "function",
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"input": {"type": "string"}}},
    }
]


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock) as sim:
        yield sim


@pytest.fixture
def runtime(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> Runtime:
    configs = {
        "native": ProviderConfig(kind="openai", base_url=simulator.openai_base_url),
        "chat": ProviderConfig(
            kind="openai", base_url=simulator.openai_base_url, responses_api="chat_completions"
        ),
        "claude": ProviderConfig(kind="anthropic", base_url=simulator.anthropic_base_url),
    }
    providers: dict[str, Any] = {
        "native": OpenAIProvider("native", configs["native"]),
        "chat": OpenAIProvider("chat", configs["chat"]),
        "claude": AnthropicProvider("claude", configs["claude"]),
    }
    registry = ProviderRegistry(providers, configs=configs, default="native")
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


@pytest.fixture
async def client(api: Api) -> AsyncIterator[openai.AsyncOpenAI]:
    worker = api.runtime.worker()
    running = asyncio.create_task(worker.run())
    async with openai.AsyncOpenAI(
        base_url=f"{api.url}/v1",
        api_key=await api.key("acme"),
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk
    worker.request_stop()
    await asyncio.wait_for(running, 30)
    await api.runtime.providers.aclose()


def texts(node: Any) -> list[str]:
    """Every text a request body carries, in order (message texts, tool arguments and tool
    outputs, whichever wire format holds them)."""
    found: list[str] = []
    if isinstance(node, str):
        found.append(node)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("text", "content", "arguments", "output") and isinstance(value, str):
                found.append(value)
            elif key == "input" and isinstance(value, dict):  # an Anthropic tool_use block
                found.append(str(value.get("input")))
            elif isinstance(value, dict | list):
                found.extend(texts(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(texts(value) if isinstance(value, dict | list | str) else [])
    return found


def in_order(expected: list[str], actual: list[str]) -> bool:
    """Whether each of `expected` is within a text of `actual`, in this order."""
    rest = iter(actual)
    return all(any(want in text for text in rest) for want in expected)


def received(simulator: Simulator, model: str) -> list[dict[str, Any]]:
    path, _ = FLAVOURS[model]
    return [r.body for r in simulator.engine.requests if r.path == path and r.body is not None]


def call_of(response: Response) -> tuple[str, str]:
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.type == "function_call"
    return call.call_id, call.arguments


def turn_two_input(call_id: str) -> Any:
    return [
        {"type": "function_call_output", "call_id": call_id, "output": "the tool says 42"},
        {"role": "user", "content": "turn two"},
    ]


EXPECTED_THIRD = [
    "turn one",
    "echo: turn one",
    "turn one",  # the tool call's arguments
    "the tool says 42",
    "turn two",
    "echo: turn two",
    "turn three",
]


@pytest.mark.parametrize("model", list(FLAVOURS))
async def test_three_turns_through_previous_response_id_carry_the_whole_context(
    client: openai.AsyncOpenAI, simulator: Simulator, model: str
) -> None:
    first = await client.responses.create(
        model=model, input="turn one", tools=TOOLS, extra_body={"sim": {"tool_calls": 1}}
    )
    call_id, _ = call_of(first)
    second = await client.responses.create(
        model=model, previous_response_id=first.id, input=turn_two_input(call_id), tools=TOOLS
    )
    assert second.previous_response_id == first.id
    third = await client.responses.create(
        model=model, previous_response_id=second.id, input="turn three"
    )
    assert third.output_text == "echo: turn three" and third.previous_response_id == second.id
    one, two, three = received(simulator, model)
    _, holder = FLAVOURS[model]
    assert in_order(["turn one"], texts(one[holder]))
    assert in_order(EXPECTED_THIRD[:5], texts(two[holder]))
    assert in_order(EXPECTED_THIRD, texts(three[holder]))
    for sent in (one, two, three):
        assert "previous_response_id" not in sent and "jobgate_context" not in sent


@pytest.mark.parametrize("model", list(FLAVOURS))
async def test_three_turns_through_a_conversation_carry_the_whole_context(
    client: openai.AsyncOpenAI, simulator: Simulator, model: str
) -> None:
    conversation = await client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "remember the number 7"}],
        metadata={"topic": "numbers"},
    )
    assert isinstance(conversation, Conversation) and conversation.metadata == {"topic": "numbers"}
    first = await client.responses.create(
        model=model,
        conversation=conversation.id,
        input="turn one",
        tools=TOOLS,
        extra_body={"sim": {"tool_calls": 1}},
    )
    assert first.conversation is not None and first.conversation.id == conversation.id
    call_id, arguments = call_of(first)
    second = await client.responses.create(
        model=model, conversation=conversation.id, input=turn_two_input(call_id), tools=TOOLS
    )
    third = await client.responses.create(
        model=model, conversation={"id": conversation.id}, input="turn three"
    )
    assert third.output_text == "echo: turn three"
    one, two, three = received(simulator, model)
    _, holder = FLAVOURS[model]
    # (an Anthropic request joins the first item and turn one in one user message, which the
    # simulator echoes whole)
    expected = [
        "remember the number 7",
        "turn one",
        first.output_text,
        json.loads(arguments)["input"],  # the tool call (Anthropic: its `input` object)
        "the tool says 42",
        "turn two",
        second.output_text,
        "turn three",
    ]
    assert in_order(expected[:2], texts(one[holder]))
    assert in_order(expected[:6], texts(two[holder]))
    assert in_order(expected, texts(three[holder]))
    for sent in (one, two, three):
        assert "conversation" not in sent and "jobgate_context" not in sent
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    kinds = [item.type for item in items]
    # the first item, then each turn: its input, then its output (text, tool call)
    assert kinds == [
        "message",
        "message", "message", "function_call",
        "function_call_output", "message", "message",
        "message", "message",
    ]  # fmt: skip
    assert in_order([*expected, third.output_text], texts([item.model_dump() for item in items]))
