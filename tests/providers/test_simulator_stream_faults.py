"""The simulator is never kinder than the providers: `sim.fail_with` `stream_*` reports a rate
limit, a transient fault, a quota or a stall inside a 200's stream, halfway through its text,
in each provider's exact shape (read by the official SDKs in strict mode), and the adapters
classify each as the real one; Chat Completions `n` and `logprobs` stream as OpenAI streams
them, so a streamed call stores the same result as a plain one."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import ResponseErrorEvent

from jobgate import errors
from jobgate.providers.base import ProviderCall
from jobgate.providers.simulated import SimProvider
from jobgate.simulator.server import Simulator
from tests.providers.sdk import openai_strict
from tests.providers.test_adapters import FLAVOURS, Flavour, build, call

pytestmark = pytest.mark.asyncio
EXPECTED: dict[str, type[errors.ProviderError]] = {
    "stream_rate_limit": errors.ProviderRateLimited,
    "stream_server_error": errors.ProviderRetryable,
    "stream_overloaded": errors.ProviderRetryable,
    "stream_quota": errors.ProviderQuotaExceeded,
}


class Deltas:
    def __init__(self) -> None:
        self.texts: list[str] = []

    async def __call__(self, text: str) -> None:
        self.texts.append(text)


@pytest.fixture(params=FLAVOURS, ids=[f.name for f in FLAVOURS])
def flavour(request: pytest.FixtureRequest) -> Flavour:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def adapter(flavour: Flavour, simulator: Simulator) -> AsyncIterator[Any]:
    provider = build(flavour, simulator)
    yield provider
    await provider.aclose()


@pytest.mark.parametrize("fault", sorted(EXPECTED))
async def test_a_fault_mid_stream_is_classified_as_the_providers_own(
    flavour: Flavour, adapter: Any, fault: str
) -> None:
    deltas = Deltas()
    with pytest.raises(errors.ProviderError) as caught:
        await adapter.stream(call(flavour, fail_with=fault, chunks=6, retry_after_s=7), deltas)
    assert type(caught.value) is EXPECTED[fault], caught.value
    assert 0 < len(deltas.texts) < 6  # after a 200 and some text
    if fault == "stream_rate_limit":
        assert isinstance(caught.value, errors.ProviderRateLimited)
        # The wait the provider named (less the moments the stream took), never 0.
        assert caught.value.retry_after_s >= 6.5


async def test_a_stall_mid_stream_is_a_retryable_timeout(flavour: Flavour, adapter: Any) -> None:
    deltas = Deltas()
    stalled = dataclasses.replace(
        call(flavour, fail_with="stream_stall", chunks=6), stall_timeout_s=0.3
    )
    with pytest.raises(errors.ProviderRetryable) as caught:
        await asyncio.wait_for(adapter.stream(stalled, deltas), 10)
    assert caught.value.code == "stream_stalled" and 0 < len(deltas.texts) < 6


@pytest.mark.parametrize(
    "plain", [f for f in FLAVOURS if f.kind == "openai"], ids=lambda f: str(f.name)
)  # the anthropic adapter always streams
async def test_a_stream_fault_without_a_stream_is_its_http_twin(
    plain: Flavour, simulator: Simulator
) -> None:
    adapter = build(plain, simulator)
    with pytest.raises(errors.ProviderRateLimited) as caught:
        await adapter.call(call(plain, fail_with="stream_rate_limit", retry_after_s=3))
    assert caught.value.status_code == 429
    await adapter.aclose()


# -- the payloads under the official SDKs -------------------------------------------------------


def _sim(**directives: object) -> dict[str, str]:
    return {"x-jobgate-sim": orjson.dumps(directives).decode()}


async def test_the_openai_sdk_raises_on_a_chat_stream_fault(simulator: Simulator) -> None:
    async with openai.AsyncOpenAI(
        base_url=simulator.openai_base_url, api_key="sk", max_retries=0,
        _strict_response_validation=True,
    ) as client:  # fmt: skip
        stream = await client.chat.completions.create(
            model="gpt-4.1-mini",
            messages=[{"role": "user", "content": "a long enough prompt"}],
            stream=True,
            extra_headers=_sim(fail_with="stream_rate_limit", retry_after_s=6.57),
        )
        with pytest.raises(openai.APIError) as caught:
            async for _ in stream:
                pass
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "rate_limit_exceeded"
    assert body["type"] == "tokens" and "Please try again in 6.57s" in body["message"]
    assert body["headers"]["x-ratelimit-remaining-tokens"] == "0"


async def test_the_openai_sdk_reads_a_responses_stream_fault(simulator: Simulator) -> None:
    async with openai.AsyncOpenAI(
        base_url=simulator.openai_base_url, api_key="sk", max_retries=0,
        _strict_response_validation=True,
    ) as client:  # fmt: skip
        stream = await client.responses.create(
            model="gpt-4.1-mini",
            input="a long enough prompt",
            stream=True,
            extra_headers=_sim(fail_with="stream_server_error"),
        )
        events = [event async for event in stream]
    last = events[-1]
    assert isinstance(last, ResponseErrorEvent) and last.code is None
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(numbers)))


async def test_the_anthropic_sdk_raises_on_a_messages_stream_fault(simulator: Simulator) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=simulator.anthropic_base_url, api_key="sk", max_retries=0,
        _strict_response_validation=True,
    ) as client:  # fmt: skip
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with client.messages.stream(
                model="claude-x",
                max_tokens=64,
                messages=[{"role": "user", "content": "a long enough prompt"}],
                extra_headers=_sim(fail_with="stream_quota"),
            ) as stream:
                async for _ in stream:
                    pass
    assert caught.value.error_code == "enforced_spend_limit_reached"


# -- n and logprobs ----------------------------------------------------------------------------

CHAT_BODY = {
    "model": "gpt-4.1-mini",
    "messages": [{"role": "user", "content": "count the choices please"}],
    "n": 3,
    "logprobs": True,
    "top_logprobs": 2,
}


def _comparable(completion: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in completion.items() if k not in ("id", "created")}


async def test_chat_n_and_logprobs_stream_as_openai_streams_them(simulator: Simulator) -> None:
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        plain = (await client.post("/v1/chat/completions", json=CHAT_BODY)).json()
        streamed = await client.post(
            "/v1/chat/completions",
            json={**CHAT_BODY, "stream": True, "stream_options": {"include_usage": True}},
        )
    openai_strict(ChatCompletion, plain)
    assert [c["index"] for c in plain["choices"]] == [0, 1, 2]
    assert all(c["logprobs"]["content"] for c in plain["choices"])
    chunks = [
        orjson.loads(line.removeprefix("data: "))
        for line in streamed.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    for chunk in chunks:
        openai_strict(ChatCompletionChunk, chunk)
    for choice in plain["choices"]:
        parts = [c["choices"][0] for c in chunks if c["choices"] and
                 c["choices"][0]["index"] == choice["index"]]  # fmt: skip
        text = "".join(p["delta"].get("content") or "" for p in parts)
        tokens = [t for p in parts if p["logprobs"] for t in p["logprobs"]["content"]]
        assert text == choice["message"]["content"]
        assert tokens == choice["logprobs"]["content"]


@pytest.mark.parametrize("kind", ["simulator", "in_process"])
async def test_a_streamed_call_stores_what_a_plain_one_does(
    simulator: Simulator, kind: str
) -> None:
    chat = next(f for f in FLAVOURS if f.name == "openai-chat")
    provider: Any = build(chat, simulator) if kind == "simulator" else SimProvider()
    request = ProviderCall("job_1", "ten_1", chat.endpoint, CHAT_BODY, "gpt-4.1-mini", 1, 1, "k")
    plain = await provider.call(request)
    deltas = Deltas()
    streamed = await provider.stream(request, deltas)
    openai_strict(ChatCompletion, streamed.body)
    assert _comparable(streamed.body) == _comparable(plain.body)
    assert streamed.usage == plain.usage
    assert "".join(deltas.texts) == plain.body["choices"][0]["message"]["content"]
    await provider.aclose()


@pytest.mark.parametrize("fault", sorted(EXPECTED))
@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/responses"])
async def test_the_sim_provider_reports_the_same_faults_mid_stream(
    fault: str, endpoint: str
) -> None:
    flavour = next(f for f in FLAVOURS if f.endpoint == endpoint)
    deltas = Deltas()
    with pytest.raises(errors.ProviderError) as caught:
        await SimProvider().stream(call(flavour, fail_with=fault, chunks=6), deltas)
    assert type(caught.value) is EXPECTED[fault], caught.value
    assert 0 < len(deltas.texts) < 6


async def test_the_sim_provider_stalls_for_the_calls_stall_timeout() -> None:
    chat = next(f for f in FLAVOURS if f.name == "openai-chat")
    stalled = dataclasses.replace(
        call(chat, fail_with="stream_stall", chunks=4), stall_timeout_s=0.2
    )
    with pytest.raises(errors.ProviderRetryable) as caught:
        await asyncio.wait_for(SimProvider().stream(stalled, Deltas()), 10)
    assert caught.value.code == "stream_stalled"
