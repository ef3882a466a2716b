"""The simulator as a rate-limited account: rpm and tpm per model, enforced with
token buckets on the simulator's clock, answered with 429s carrying the providers' headers,
which jobgate's classification reads as a rate limit with the right wait."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from jobgate import errors
from jobgate.providers import calls
from jobgate.simulator.enforcement import Charge, Enforcer, Limits, Refusal, estimate_tokens
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock

START = datetime(2030, 1, 1, tzinfo=UTC)


def chat(text: str = "hi", max_tokens: int | None = None, model: str = "m") -> dict[str, object]:
    body: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": text}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def test_requests_are_refused_past_the_burst_and_admitted_as_the_bucket_refills() -> None:
    clock = FakeClock(START)
    enforcer = Enforcer(Limits(rpm=60, window_s=10), lambda: clock.now().timestamp())
    answers = [enforcer.admit("m", chat()) for _ in range(11)]
    assert all(isinstance(a, Charge) for a in answers[:10])
    refused = answers[10]
    assert isinstance(refused, Refusal) and refused.limit == "requests"
    assert refused.retry_after_s == pytest.approx(1.0)
    clock.advance(0.5)
    assert isinstance(enforcer.admit("m", chat()), Refusal)
    clock.advance(0.5)
    assert isinstance(enforcer.admit("m", chat()), Charge)
    assert isinstance(enforcer.admit("other-model", chat()), Charge)  # limits are per model
    assert (enforcer.admitted, enforcer.refused) == (12, 2)


def test_tokens_are_estimated_on_arrival_and_settled_to_the_usage() -> None:
    clock = FakeClock(START)
    enforcer = Enforcer(Limits(tpm=600, window_s=10), lambda: clock.now().timestamp())
    assert estimate_tokens(chat("x" * 40, max_tokens=50)) == 10 + 50
    first = enforcer.admit("m", chat("x" * 40, max_tokens=50))
    assert isinstance(first, Charge) and first.tokens == 60
    second = enforcer.admit("m", chat("x" * 40, max_tokens=50))
    assert isinstance(second, Refusal) and second.limit == "tokens"
    assert second.retry_after_s == pytest.approx(2.0)  # 20 tokens missing at 10 a second
    enforcer.settle(first, {"prompt_tokens": 10, "completion_tokens": 5})
    assert isinstance(enforcer.admit("m", chat("x" * 40, max_tokens=50)), Charge)
    # A request larger than the whole bucket can never pass.
    clock.advance(60)
    too_big = enforcer.admit("m", chat(max_tokens=500))
    assert isinstance(too_big, Refusal) and too_big.limit == "tokens"


@pytest.fixture
async def limited() -> AsyncIterator[tuple[Simulator, FakeClock]]:
    clock = FakeClock(START)
    async with Simulator(clock=clock, limits=Limits(rpm=2, tpm=1000)) as sim:
        yield sim, clock


async def test_an_openai_429_carries_x_ratelimit_and_retry_after(
    limited: tuple[Simulator, FakeClock],
) -> None:
    sim, clock = limited
    async with httpx.AsyncClient(base_url=sim.openai_base_url) as client:
        first = await client.post("/chat/completions", json=chat())
        assert first.status_code == 200
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        assert first.headers["x-ratelimit-limit-tokens"] == "1000"
        assert (await client.post("/chat/completions", json=chat())).status_code == 200
        refused = await client.post("/chat/completions", json=chat())
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.headers["retry-after"] == "30"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"] == "30s"
    error = calls.classify_status(refused, now=clock.now(), default_retry_after_s=5.0)
    assert isinstance(error, errors.ProviderRateLimited)
    assert error.retry_after_s == pytest.approx(30.0)
    assert sim.state()["rate_limits"] == {"admitted": 2, "refused": 1}


async def test_an_anthropic_429_carries_anthropic_ratelimit_and_retry_after(
    limited: tuple[Simulator, FakeClock],
) -> None:
    sim, clock = limited
    body = {**chat(max_tokens=100), "model": "claude-x"}
    headers = {"anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=sim.anthropic_base_url, headers=headers) as client:
        statuses = [(await client.post("/v1/messages", json=body)).status_code for _ in range(2)]
        refused = await client.post("/v1/messages", json=body)
    assert statuses == [200, 200]
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["retry-after"] == "30"
    assert refused.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert refused.headers["anthropic-ratelimit-requests-reset"] == "2030-01-01T00:00:30Z"
    assert "anthropic-ratelimit-tokens-remaining" in refused.headers
    error = calls.classify_status(refused, now=clock.now(), default_retry_after_s=5.0)
    assert isinstance(error, errors.ProviderRateLimited)
    assert error.retry_after_s == pytest.approx(30.0)


async def test_an_unlimited_simulator_sends_no_rate_limit_headers(simulator: Simulator) -> None:
    async with httpx.AsyncClient(base_url=simulator.openai_base_url) as client:
        answer = await client.post("/chat/completions", json=chat())
    assert answer.status_code == 200
    assert not [name for name in answer.headers if name.startswith("x-ratelimit")]
    assert simulator.state()["rate_limits"] is None
