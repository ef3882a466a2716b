"""What a native batch line carries to its provider: the exact input file (OpenAI) and create
body (Anthropic) sent to a real provider hold no `sim` member, each request valid for the
official SDK's create params; a provider configured with `sim_directives` (the simulator)
gets each line's directives, and the simulator runs each line as its own directives say."""

from __future__ import annotations

import email.parser
import email.policy
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from anthropic.types.messages import batch_create_params
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

from jobgate.config import ProviderConfig
from jobgate.domain.provider_batches import Part
from jobgate.providers.anthropic_batches import AnthropicBatches
from jobgate.providers.batch_apis import AnthropicBatchApi, NativeBatchApi, OpenAIBatchApi
from jobgate.providers.openai_batches import OpenAIBatches
from jobgate.roles.native_dispatch import part_line
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock
from tests.providers.sdk import request_matches

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"
DIRECTIVES = {"outcome": "failed", "latency_s": 2}
PART = Part("batch_1", "up", 0, (1, 2), 100)


def chat(text: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": text}]}
    return {**body, "max_completion_tokens": 64, **extra}


# Line 1 asks nothing of the simulator; line 2 asks it to fail.
LINES = [part_line(1, CHAT, chat("plain")), part_line(2, CHAT, chat("failing", sim=DIRECTIVES))]


class Sent:
    """A MockTransport that answers creates as the provider would and keeps what was sent:
    the uploaded input file and the create bodies."""

    def __init__(self) -> None:
        self.files: list[bytes] = []
        self.creates: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/files"):
            self.files.append(_uploaded(request))
            return httpx.Response(200, json={"id": "file-1", "object": "file"})
        if path.endswith("/messages/batches"):
            self.creates.append(orjson.loads(request.content))
            return httpx.Response(200, json={"id": "msgbatch_1", "type": "message_batch"})
        self.creates.append(orjson.loads(request.content))
        return httpx.Response(200, json={"id": "batch_1", "object": "batch"})


def _uploaded(request: httpx.Request) -> bytes:
    """The file of a multipart upload, as sent."""
    head = f"Content-Type: {request.headers['content-type']}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + request.read())
    (data,) = [
        part.get_payload(decode=True) for part in message.iter_parts() if part.get_filename()
    ]
    assert isinstance(data, bytes)
    return data


def _openai(config: ProviderConfig, transport: httpx.AsyncBaseTransport | None) -> OpenAIBatchApi:
    return OpenAIBatchApi("up", config, OpenAIBatches("up", config, transport=transport))


def _anthropic(
    config: ProviderConfig, transport: httpx.AsyncBaseTransport | None
) -> AnthropicBatchApi:
    return AnthropicBatchApi("up", config, AnthropicBatches("up", config, transport=transport))


def _config(kind: str, **fields: Any) -> ProviderConfig:
    return ProviderConfig(kind=kind, base_url="http://upstream.test/v1", **fields)


async def _jsonl_sent(config: ProviderConfig) -> list[dict[str, Any]]:
    sent = Sent()
    api = _openai(config, httpx.MockTransport(sent))
    try:
        await api.parts.create_part(PART, LINES)
    finally:
        await api.aclose()
    (data,) = sent.files
    assert data.endswith(b"\n")
    return [orjson.loads(line) for line in data.splitlines()]


async def _requests_sent(config: ProviderConfig) -> list[dict[str, Any]]:
    sent = Sent()
    api = _anthropic(config, httpx.MockTransport(sent))
    try:
        await api.parts.create_part(PART, LINES)
    finally:
        await api.aclose()
    (body,) = sent.creates
    assert set(body) == {"requests"}
    requests: list[dict[str, Any]] = body["requests"]
    return requests


async def test_openai_gets_lines_without_sim_each_a_valid_create() -> None:
    config = _config("openai", native_batches=True)
    lines = await _jsonl_sent(config)
    texts = ["plain", "failing"]
    expected = [{**line, "body": chat(text)} for line, text in zip(LINES, texts, strict=True)]
    assert lines == expected  # the caller's lines, less `sim`, in order
    for line in lines:
        assert set(line) == {"custom_id", "method", "url", "body"}
        request_matches(CompletionCreateParamsNonStreaming, line["body"])
    api = _openai(config, httpx.MockTransport(Sent()))
    assert [api.size(line) for line in LINES] == [len(orjson.dumps(line)) for line in lines]
    await api.aclose()


async def test_anthropic_gets_requests_without_sim_each_a_valid_create() -> None:
    requests = await _requests_sent(_config("anthropic", native_batches=True))
    assert len(requests) == 2
    for request in requests:
        request_matches(batch_create_params.Request, request)
        request_matches(MessageCreateParamsNonStreaming, request["params"])
    assert "sim" not in requests[1]["params"]


async def test_a_provider_that_reads_directives_gets_each_lines_own() -> None:
    lines = await _jsonl_sent(_config("openai", native_batches=True, sim_directives=True))
    assert "sim" not in lines[0]["body"] and lines[1]["body"]["sim"] == DIRECTIVES
    config = _config("anthropic", native_batches=True, sim_directives=True)
    requests = await _requests_sent(config)
    assert "sim" not in requests[0]["params"]
    assert requests[1]["params"]["sim"] == DIRECTIVES


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock) as server:
        yield server


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("directives", [True, False])
async def test_the_simulator_runs_each_line_as_its_directives_say(
    simulator: Simulator, clock: FakeClock, kind: str, directives: bool
) -> None:
    base = simulator.openai_base_url if kind == "openai" else simulator.anthropic_base_url
    config = ProviderConfig(
        kind=kind,
        base_url=base,
        native_batches=True,
        sim_directives=directives,
    )
    make = _openai if kind == "openai" else _anthropic
    api: NativeBatchApi = make(config, None)
    try:
        created = await api.parts.create_part(PART, LINES)
        clock.advance(3600)
        status = await api.state(str(created["id"]))
        assert status.ended
        back = await api.results(PART.key, status, LINES)
    finally:
        await api.aclose()
    # Without directives the failing line is an ordinary one: a real provider would run it.
    assert [line.succeeded for line in back] == [True, not directives]
