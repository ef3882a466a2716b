"""The adapters' streaming mode (live output streaming) against the simulator server over real
HTTP: OpenAI Chat Completions and Responses and Anthropic Messages hand their text deltas on
as they arrive and answer the same whole body a plain call does (validated under the SDKs'
types, strict), with usage from the stream's final event; requests match the SDKs' streaming
request types; a stream that breaks midway is an unknown outcome, an error status classified
as for a plain call."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion, completion_create_params
from openai.types.responses import Response, response_create_params

from jobgate import errors
from jobgate.providers.base import ProviderCall
from jobgate.providers.responses_front import ResponsesFront
from jobgate.providers.streaming import streaming_for
from jobgate.simulator.server import Simulator
from jobgate.wire.content import output_text
from tests.providers.sdk import anthropic_strict, openai_strict, request_matches
from tests.providers.test_adapters import FLAVOURS, Flavour, build, call

pytestmark = pytest.mark.asyncio
STREAMING_PARAMS = {
    "openai-chat": completion_create_params.CompletionCreateParamsStreaming,
    "openai-responses": response_create_params.ResponseCreateParamsStreaming,
}
RESULT_TYPES: dict[str, Any] = {
    "openai-chat": ChatCompletion,
    "openai-responses": Response,
    "anthropic-messages": Message,
}


@pytest.fixture(params=FLAVOURS, ids=[f.name for f in FLAVOURS])
def flavour(request: pytest.FixtureRequest) -> Flavour:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def adapter(flavour: Flavour, simulator: Simulator) -> AsyncIterator[Any]:
    provider = build(flavour, simulator)
    yield provider
    await provider.aclose()


class Collector:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.deltas: list[tuple[float, str]] = []

    async def __call__(self, text: str) -> None:
        self.deltas.append((time.monotonic() - self.started, text))

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.deltas)


async def test_deltas_arrive_as_produced_and_the_answer_is_whole(
    flavour: Flavour, adapter: Any, simulator: Simulator
) -> None:
    streamer = streaming_for(adapter, flavour.endpoint)
    assert streamer is not None
    deltas = Collector()
    result = await streamer.stream(call(flavour, latency_s=0.5, chunks=5), deltas)
    assert len(deltas.deltas) == 5
    assert deltas.deltas[0][0] < deltas.deltas[-1][0] - 0.25  # spread, not all at the end
    assert deltas.text == output_text(result.body) and "echo: hello" in deltas.text
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0  # the final event's
    model = RESULT_TYPES[flavour.name]
    (anthropic_strict if flavour.kind == "anthropic" else openai_strict)(model, result.body)
    (sent,) = [r for r in simulator.engine.requests if r.path == flavour.path]
    assert sent.body is not None and sent.body["stream"] is True
    if flavour.name in STREAMING_PARAMS:
        request_matches(STREAMING_PARAMS[flavour.name], sent.body)
    if flavour.name == "openai-chat":
        assert sent.body["stream_options"] == {"include_usage": True}


async def test_a_stream_broken_midway_is_an_unknown_outcome(flavour: Flavour, adapter: Any) -> None:
    deltas = Collector()
    with pytest.raises(errors.ProviderOutcomeUnknown):
        await adapter.stream(call(flavour, fail_with="drop", chunks=4), deltas)


async def test_an_error_status_is_classified_as_for_a_call(flavour: Flavour, adapter: Any) -> None:
    with pytest.raises(errors.ProviderRateLimited):
        await adapter.stream(call(flavour, fail_with="rate_limit", retry_after_s=0.1), Collector())
    with pytest.raises(errors.ProviderFatal):
        await adapter.stream(call(flavour, fail_with="invalid_request"), Collector())


async def test_a_translated_responses_job_streams_through_chat_completions(
    simulator: Simulator,
) -> None:
    chat = next(f for f in FLAVOURS if f.name == "openai-chat")
    front = ResponsesFront(build(chat, simulator), "chat_completions")
    assert front.streams("/v1/responses")
    deltas = Collector()
    request = ProviderCall(
        job_id="resp_1",
        tenant_id="ten_1",
        endpoint="/v1/responses",
        body={"model": "gpt-4.1-mini", "input": "translate me", "sim": {"chunks": 3}},
        model="gpt-4.1-mini",
        attempt=1,
        run_count=1,
        idempotency_key="resp_1",
    )
    result = await front.stream(request, deltas)
    assert len(deltas.deltas) == 3 and deltas.text == output_text(result.body)
    assert result.body["object"] == "response" and "translate me" in deltas.text
    await front.inner.aclose()
