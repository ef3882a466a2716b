"""A streamed Chat Completion, assembled by the `openai` adapter, is the completion a plain call
answers: every choice of `n` (OpenAI interleaves them, one choice per chunk, by `index`) and
each choice's `logprobs` (its tokens spread over the chunks). Hand-written payloads in
OpenAI's shapes, validated by the SDK's types, over httpx.MockTransport."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from jobgate.providers.base import ProviderCall
from jobgate.providers.openai import CHAT_COMPLETIONS
from tests.providers import upstreams
from tests.providers.sdk import openai_strict
from tests.providers.upstreams import Upstream

pytestmark = pytest.mark.asyncio
BODY = {
    "model": "gpt-4.1-mini",
    "messages": [{"role": "user", "content": "hi"}],
    "n": 2,
    "logprobs": True,
    "top_logprobs": 1,
}
CALL = ProviderCall("job_1", "ten_1", CHAT_COMPLETIONS, BODY, "gpt-4.1-mini", 1, 1, "job_1")


def token(text: str, logprob: float) -> dict[str, Any]:
    entry = {"token": text, "logprob": logprob, "bytes": list(text.encode())}
    return {**entry, "top_logprobs": [entry]}


ANSWERS = {0: [("Hel", -0.1), ("lo", -0.2)], 1: [("Hi", -0.3), ("!", -0.4)]}
COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-fake",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-4.1-mini",
    "system_fingerprint": "fp_fake",
    "service_tier": "default",
    "choices": [
        {
            "index": index,
            "message": {
                "role": "assistant",
                "content": "".join(text for text, _ in tokens),
                "refusal": None,
                "annotations": [],
            },
            "finish_reason": "stop",
            "logprobs": {
                "content": [token(text, lp) for text, lp in tokens],
                "refusal": None,
            },
        }
        for index, tokens in ANSWERS.items()
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
}


def _chunks() -> list[dict[str, Any]]:
    """OpenAI's stream of COMPLETION: each choice opens with its role, then one token a chunk,
    the choices interleaved, then each choice's finish and the usage chunk."""
    chunks = [upstreams.chat_chunk("", role="assistant", index=i) for i in ANSWERS]
    for step in range(2):
        for index, tokens in ANSWERS.items():
            text, lp = tokens[step]
            logprobs = {"content": [token(text, lp)], "refusal": None}
            chunks.append(upstreams.chat_chunk(text, index=index, logprobs=logprobs))
    chunks += [upstreams.chat_chunk(index=i, finish_reason="stop") for i in ANSWERS]
    chunks.append(upstreams.usage_chunk(prompt_tokens=5, completion_tokens=4))
    return chunks


async def test_every_choice_and_its_logprobs_survive_the_stream() -> None:
    openai_strict(ChatCompletion, COMPLETION)
    chunks = _chunks()
    for chunk in chunks:
        openai_strict(ChatCompletionChunk, chunk)
    upstream = Upstream(upstreams.stream(upstreams.openai_sse(chunks)))
    texts: list[str] = []

    async def collect(text: str) -> None:
        texts.append(text)

    provider = upstream.openai()
    result = await provider.stream(CALL, collect)
    assert result.body == COMPLETION
    assert "".join(texts) == "Hello"  # the first choice's text is the job's live output
    (sent,) = upstream.bodies
    assert sent["n"] == 2 and sent["logprobs"] is True  # asked of the provider as given
    await provider.aclose()


async def test_a_plain_and_a_streamed_job_store_the_same_result() -> None:
    upstream = Upstream(
        upstreams.status(200, COMPLETION), upstreams.stream(upstreams.openai_sse(_chunks()))
    )
    provider = upstream.openai()

    async def ignore(_: str) -> None:
        pass

    plain = await provider.call(CALL)
    streamed = await provider.stream(CALL, ignore)
    assert streamed.body == plain.body and streamed.usage == plain.usage
    await provider.aclose()
