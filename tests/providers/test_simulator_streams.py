"""The simulator's streamed answers (`stream: true`) under the official SDKs in strict mode:
Chat Completions chunks, Responses events and Anthropic Messages events, each event also
checked for members outside the published schema, with the text in `sim.chunks` deltas spread
over `sim.latency_s`."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from jobgate.simulator.server import Simulator
from tests.providers.sdk import anthropic_strict, openai_strict

pytestmark = pytest.mark.asyncio
PROMPT = "tell me a long story about streams"


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
    """The data of every SSE event of a raw POST (to check each against the schema)."""
    headers = {"anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        answer = await client.post(path, json=body, headers=headers)
    assert answer.headers["content-type"].startswith("text/event-stream")
    return [
        orjson.loads(line.removeprefix("data: "))
        for line in answer.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


async def test_chat_completions_stream(simulator: Simulator, oai: openai.AsyncOpenAI) -> None:
    started = time.monotonic()
    arrivals: list[float] = []
    text = ""
    usage = None
    stream = await oai.chat.completions.create(
        model="gpt-4.1-mini",
        messages=[{"role": "user", "content": PROMPT}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=sim(latency_s=0.5, chunks=5),
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic() - started)
            text += chunk.choices[0].delta.content
        usage = chunk.usage or usage
    assert PROMPT in text and len(arrivals) == 5
    assert arrivals[0] < 0.35 and arrivals[-1] >= 0.45  # spread evenly over the latency
    assert usage is not None and usage.completion_tokens > 0
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    for event in await _events(simulator, "/v1/chat/completions", body):
        openai_strict(ChatCompletionChunk, event)


async def test_responses_stream(simulator: Simulator, oai: openai.AsyncOpenAI) -> None:
    stream = await oai.responses.create(
        model="gpt-4.1-mini", input=PROMPT, stream=True, extra_headers=sim(chunks=4)
    )
    kinds: list[str] = []
    text = ""
    numbers: list[int] = []
    async for event in stream:
        kinds.append(event.type)
        numbers.append(event.sequence_number)
        if event.type == "response.output_text.delta":
            text += event.delta
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds.count("response.output_text.delta") == 4 and kinds[-1] == "response.completed"
    assert PROMPT in text and numbers == list(range(len(numbers)))
    body = {"model": "m", "input": "x", "stream": True}
    for event in await _events(simulator, "/v1/responses", body):
        openai_strict(ResponseStreamEvent, event)  # type: ignore[arg-type]


async def test_anthropic_messages_stream(
    simulator: Simulator, claude: anthropic.AsyncAnthropic
) -> None:
    deltas: list[str] = []
    async with claude.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=100,
        messages=[{"role": "user", "content": PROMPT}],
        extra_headers=sim(chunks=7),
    ) as stream:
        async for text in stream.text_stream:
            deltas.append(text)
        final = await stream.get_final_message()
    assert len(deltas) == 7 and "".join(deltas) == final.content[0].text  # type: ignore[union-attr]
    assert final.usage.output_tokens > 0
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
    }
    for event in await _events(simulator, "/v1/messages", body):
        if event["type"] == "ping":  # a keep-alive Anthropic sends too, outside the union
            continue
        anthropic_strict(RawMessageStreamEvent, event)  # type: ignore[arg-type]
