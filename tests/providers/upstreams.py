"""Fake provider upstreams for streaming tests (httpx.MockTransport): each request gets the next
scripted answer, written as the real APIs write their event streams (OpenAI Chat Completions
chunks ending `data: [DONE]`, Responses events, Anthropic Messages events), and every request
is kept. A stream can also stall (send nothing until released), as a provider sometimes does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import httpx
import orjson

from jobgate.config import ProviderConfig
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.openai import OpenAIProvider
from jobgate.testing import FakeClock

Event = Mapping[str, Any]
Answer = Callable[[httpx.Request], httpx.Response]


def chat_chunk(
    content: str | None = None,
    *,
    index: int = 0,
    finish_reason: str | None = None,
    role: str | None = None,
    logprobs: Any = None,
) -> dict[str, Any]:
    """One `chat.completion.chunk` as OpenAI streams it."""
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4.1-mini",
        "system_fingerprint": "fp_fake",
        "service_tier": "default",
        "choices": [
            {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        ],
    }


def usage_chunk(prompt_tokens: int = 5, completion_tokens: int = 3) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4.1-mini",
        "system_fingerprint": "fp_fake",
        "service_tier": "default",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def chat_text(*pieces: str) -> list[dict[str, Any]]:
    """The chunks of an answer made of `pieces`, with its usage chunk."""
    return [
        chat_chunk("", role="assistant"),
        *(chat_chunk(piece) for piece in pieces),
        chat_chunk(finish_reason="stop"),
        usage_chunk(completion_tokens=len(pieces)),
    ]


def openai_sse(events: Sequence[Event], *, done: bool = True) -> bytes:
    """OpenAI's event stream: `data:` lines only (Chat Completions), ending `[DONE]`."""
    body = b"".join(b"data: " + orjson.dumps(event) + b"\n\n" for event in events)
    return body + (b"data: [DONE]\n\n" if done else b"")


def typed_sse(events: Sequence[Event]) -> bytes:
    """An event stream whose events are named by their `type` (Responses, Anthropic)."""
    return b"".join(
        f"event: {event['type']}\ndata: ".encode() + orjson.dumps(event) + b"\n\n"
        for event in events
    )


def stream(body: bytes, **headers: str) -> Answer:
    """A 200 that streams `body`."""
    return lambda _: httpx.Response(
        200, content=body, headers={"content-type": "text/event-stream", **headers}
    )


def status(code: int, body: Any, **headers: str) -> Answer:
    return lambda _: httpx.Response(code, json=body, headers=headers)


class Stall:
    """A 200 that sends `head`, then nothing until `release` is set (then `tail`)."""

    def __init__(self, head: bytes, tail: bytes = b"") -> None:
        self.head = head
        self.tail = tail
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()

    def __call__(self, _: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, content=self._body(), headers={"content-type": "text/event-stream"}
        )

    async def _body(self) -> AsyncIterator[bytes]:
        yield self.head
        self.waiting.set()
        await self.release.wait()
        yield self.tail


class Upstream:
    """Answers each request with the next of `answers` (the last one repeats)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        index = min(len(self.requests), len(self.answers)) - 1
        return self.answers[index](request)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [orjson.loads(request.content) for request in self.requests]

    def openai(
        self, clock: FakeClock | None = None, name: str = "upstream", **config: Any
    ) -> OpenAIProvider:
        settings = ProviderConfig(kind="openai", base_url="http://openai.test/v1", **config)
        return OpenAIProvider(
            name, settings, clock=clock, transport=httpx.MockTransport(self.handler)
        )

    def anthropic(
        self, clock: FakeClock | None = None, name: str = "upstream", **config: Any
    ) -> AnthropicProvider:
        settings = ProviderConfig(kind="anthropic", base_url="http://anthropic.test", **config)
        return AnthropicProvider(
            name, settings, clock=clock, transport=httpx.MockTransport(self.handler)
        )
