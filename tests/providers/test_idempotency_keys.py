"""Adapters send the call's idempotency key (the worker's choice: the job id, suffixed by the
provider generation after a provider job ended), not the job id itself, on every create."""

from __future__ import annotations

from typing import Any

from jobgate.config import ProviderConfig
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.base import ProviderCall
from jobgate.providers.openai import OpenAIProvider
from jobgate.simulator.server import Simulator

BATCH: dict[str, Any] = {
    "requests": [
        {
            "custom_id": "q1",
            "params": {
                "model": "claude-x",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": "hi"}],
            },
        }
    ]
}


def _call(endpoint: str, body: dict[str, Any]) -> ProviderCall:
    return ProviderCall("job_7", "ten_1", endpoint, body, None, 2, 2, "job_7:1")


async def test_openai_creates_carry_the_calls_key(simulator: Simulator) -> None:
    config = ProviderConfig(kind="openai", base_url=simulator.openai_base_url, mode="background")
    provider = OpenAIProvider("upstream", config)
    try:
        await provider.create(_call("/v1/responses", {"model": "m", "input": "x"}))
        await provider.call(
            _call("/v1/chat/completions", {"model": "m", "messages": [{"role": "user",
                                                                         "content": "x"}]})
        )  # fmt: skip
    finally:
        await provider.aclose()
    sent = [(r.path, r.headers["idempotency-key"]) for r in simulator.engine.requests]
    assert sent == [("/v1/responses", "job_7:1"), ("/v1/chat/completions", "job_7:1")]
    (created,) = [r for r in simulator.engine.requests if r.path == "/v1/responses"]
    assert created.body is not None
    assert created.body["metadata"]["jobgate_job_id"] == "job_7"  # still names the job


async def test_anthropic_creates_carry_the_calls_key(simulator: Simulator) -> None:
    config = ProviderConfig(kind="anthropic", base_url=simulator.anthropic_base_url)
    provider = AnthropicProvider("claude", config)
    try:
        await provider.create(_call("/v1/messages/batches", BATCH))
        await provider.call(_call("/v1/messages", BATCH["requests"][0]["params"]))
    finally:
        await provider.aclose()
    sent = [(r.path, r.headers["idempotency-key"]) for r in simulator.engine.requests]
    assert sent == [("/v1/messages/batches", "job_7:1"), ("/v1/messages", "job_7:1")]
