"""The OpenAI and Anthropic adapters against the simulator server, over real HTTP: every way a
call can end, each classified once; and every request they send validates under the official
SDKs' request types."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers.anthropic import MESSAGES, AnthropicProvider
from jobgate.providers.base import ProviderCall
from jobgate.providers.openai import CHAT_COMPLETIONS, RESPONSES, OpenAIProvider
from jobgate.simulator.server import Simulator
from tests.providers.sdk import request_matches


@dataclasses.dataclass
class Flavour:
    name: str
    kind: str
    endpoint: str
    body: dict[str, Any]
    params: Any  # the SDK's request TypedDict
    path: str


FLAVOURS = [
    Flavour(
        "openai-chat",
        "openai",
        CHAT_COMPLETIONS,
        {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hello"}]},
        completion_create_params.CompletionCreateParamsNonStreaming,
        "/v1/chat/completions",
    ),
    Flavour(
        "openai-responses",
        "openai",
        RESPONSES,
        {"model": "gpt-4.1-mini", "input": "hello"},
        response_create_params.ResponseCreateParamsNonStreaming,
        "/v1/responses",
    ),
    Flavour(
        "anthropic-messages",
        "anthropic",
        MESSAGES,
        {
            "model": "claude-sim",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello"}],
        },
        message_create_params.MessageCreateParamsStreaming,
        "/v1/messages",
    ),
]


@pytest.fixture(params=FLAVOURS, ids=[f.name for f in FLAVOURS])
def flavour(request: pytest.FixtureRequest) -> Flavour:
    return request.param  # type: ignore[no-any-return]


def build(
    flavour: Flavour, simulator: Simulator, **config: Any
) -> OpenAIProvider | AnthropicProvider:
    if flavour.kind == "openai":
        settings = ProviderConfig(kind="openai", base_url=simulator.openai_base_url, **config)
        return OpenAIProvider("upstream", settings)
    settings = ProviderConfig(kind="anthropic", base_url=simulator.anthropic_base_url, **config)
    return AnthropicProvider("upstream", settings)


@pytest.fixture
async def adapter(
    flavour: Flavour, simulator: Simulator, request: pytest.FixtureRequest
) -> AsyncIterator[OpenAIProvider | AnthropicProvider]:
    marker = request.node.get_closest_marker("config")
    provider = build(flavour, simulator, **(marker.kwargs if marker else {}))
    yield provider
    await provider.aclose()


def call(flavour: Flavour, job_id: str = "job_1", **sim: Any) -> ProviderCall:
    body = dict(flavour.body)
    if sim:
        body["sim"] = sim
    return ProviderCall(
        job_id=job_id,
        tenant_id="ten_1",
        endpoint=flavour.endpoint,
        body=body,
        model=body.get("model"),
        attempt=1,
        run_count=1,
        idempotency_key=job_id,
    )


async def test_success(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider, simulator: Simulator
) -> None:
    adapter.validate(flavour.endpoint, flavour.body)
    result = await adapter.call(call(flavour, latency_s=0.05))
    text = str(result.body)
    assert "echo: hello" in text
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.provider_request_id == result.body["id"]
    (sent,) = [r for r in simulator.engine.requests if r.path == flavour.path]
    assert sent.headers["idempotency-key"] == "job_1"  # the job id, stable across retries
    assert "sim" not in (sent.body or {})  # directives travel in a header, not the body
    assert "x-jobgate-sim" in sent.headers
    assert sent.body is not None
    request_matches(flavour.params, sent.body)
    if flavour.kind == "anthropic":
        assert sent.headers["anthropic-version"] == "2023-06-01"
        assert sent.body["stream"] is True  # long generations keep the connection alive


async def test_rate_limited_carries_retry_after(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider
) -> None:
    with pytest.raises(errors.ProviderRateLimited) as caught:
        await adapter.call(call(flavour, fail_with="rate_limit", retry_after_s=0.25))
    # The realistic simulator answers as the providers do: OpenAI with the exhausted limit's
    # `x-ratelimit-reset-requests: 250ms` and no retry-after; Anthropic with `retry-after` in
    # whole seconds (beside its reset time).
    expected = 0.25 if flavour.kind == "openai" else 1.0
    assert caught.value.retry_after_s == pytest.approx(expected)
    assert caught.value.status_code == 429
    assert caught.value.request_id is not None and caught.value.request_id.startswith("req_")


@pytest.mark.config(retry_after_default_s=5.0)
async def test_rate_limit_waits_for_the_reset_headers_not_the_default(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider
) -> None:
    """A multi-minute reset window is honoured (it was 5 s, the default, every time)."""
    with pytest.raises(errors.ProviderRateLimited) as caught:
        await adapter.call(call(flavour, fail_with="rate_limit", retry_after_s=360))
    assert caught.value.retry_after_s == pytest.approx(360, abs=1.0)


async def test_quota_error_is_fatal_not_a_rate_limit(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider
) -> None:
    with pytest.raises(errors.ProviderQuotaExceeded) as caught:
        await adapter.call(call(flavour, fail_with="quota"))
    assert caught.value.code == "insufficient_quota"
    assert caught.value.status_code == 429


async def test_server_error_then_success(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider
) -> None:
    flaky = call(flavour, fail_with="server_error", fail_times=1)
    with pytest.raises(errors.ProviderRetryable) as caught:
        await adapter.call(flaky)
    assert caught.value.status_code == 500
    result = await adapter.call(flaky)  # the same job retried: the provider answers now
    assert "echo: hello" in str(result.body)


async def test_overloaded_is_retryable(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider
) -> None:
    with pytest.raises(errors.ProviderRetryable) as caught:
        await adapter.call(call(flavour, fail_with="overloaded"))
    assert caught.value.status_code == (529 if flavour.kind == "anthropic" else 503)


async def test_invalid_request_is_fatal(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider
) -> None:
    with pytest.raises(errors.ProviderFatal) as caught:
        await adapter.call(call(flavour, fail_with="invalid_request"))
    assert caught.value.status_code == 400 and not isinstance(
        caught.value, errors.ProviderRetryable
    )


@pytest.mark.config(request_timeout_s=0.5)
async def test_hang_past_the_timeout_is_an_unknown_outcome(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider
) -> None:
    with pytest.raises(errors.ProviderOutcomeUnknown) as caught:
        await adapter.call(call(flavour, fail_with="hang"))
    assert not caught.value.safe_to_retry
    assert "did not answer in time" in caught.value.message


async def test_drop_after_accept_is_an_unknown_outcome(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider, simulator: Simulator
) -> None:
    with pytest.raises(errors.ProviderOutcomeUnknown) as caught:
        await adapter.call(call(flavour, fail_with="drop"))
    assert not caught.value.safe_to_retry  # a retry could run (and bill) it twice
    assert len(simulator.engine.created) == 1  # the provider did the work


@pytest.mark.config(idempotent_creates=True)
async def test_drop_resolved_by_the_idempotency_key(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider, simulator: Simulator
) -> None:
    """`idempotent_creates` is for a provider that really deduplicates (neither OpenAI nor
    Anthropic documents doing so): here the simulator is told to."""
    simulator.engine.idempotent = True
    dropped = call(flavour, fail_with="drop", fail_times=1)
    with pytest.raises(errors.ProviderOutcomeUnknown) as caught:
        await adapter.call(dropped)
    assert caught.value.safe_to_retry
    result = await adapter.call(dropped)  # same Idempotency-Key: the original answer
    assert simulator.engine.created == [result.body["id"]]


async def test_the_real_providers_do_not_deduplicate_by_idempotency_key(
    flavour: Flavour, adapter: OpenAIProvider | AnthropicProvider, simulator: Simulator
) -> None:
    """The realistic simulator runs a re-sent create again, as OpenAI and Anthropic would:
    this is why an unknown outcome is not re-sent by default."""
    dropped = call(flavour, fail_with="drop", fail_times=1)
    with pytest.raises(errors.ProviderOutcomeUnknown):
        await adapter.call(dropped)
    await adapter.call(dropped)
    assert len(simulator.engine.created) == 2  # the same key, billed twice


async def test_unauthorized_is_fatal(
    flavour: Flavour, simulator: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    simulator.api_key = "right-key"
    monkeypatch.setenv("JOBGATE_TEST_PROVIDER_KEY", "wrong-key")
    provider = build(flavour, simulator, api_key_env="JOBGATE_TEST_PROVIDER_KEY")
    try:
        with pytest.raises(errors.ProviderFatal) as caught:
            await provider.call(call(flavour))
        assert caught.value.status_code == 401
    finally:
        await provider.aclose()
    monkeypatch.setenv("JOBGATE_TEST_PROVIDER_KEY", "right-key")
    provider = build(flavour, simulator, api_key_env="JOBGATE_TEST_PROVIDER_KEY")
    try:
        assert "echo: hello" in str((await provider.call(call(flavour))).body)
    finally:
        await provider.aclose()


async def test_connection_refused_was_not_sent(flavour: Flavour) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: nobody listens there
    base = f"http://127.0.0.1:{port}"
    config = ProviderConfig(
        kind=flavour.kind,
        base_url=base + ("/v1" if flavour.kind == "openai" else ""),
    )
    provider = (
        OpenAIProvider("upstream", config)
        if flavour.kind == "openai"
        else AnthropicProvider("upstream", config)
    )
    try:
        with pytest.raises(errors.ProviderRetryable) as caught:
            await provider.call(call(flavour))
        assert caught.value.code == "connection_error"
        assert not isinstance(caught.value, errors.ProviderOutcomeUnknown)
    finally:
        await provider.aclose()


async def test_a_missing_key_variable(flavour: Flavour, simulator: Simulator) -> None:
    """Only processes that call providers need keys: the adapter builds without one, the
    registry names the variable for the roles that check at start, and a call made anyway is
    retried rather than failed for good."""
    from jobgate.clock import SystemClock
    from jobgate.config import Settings
    from jobgate.providers.registry import ProviderRegistry

    provider = build(flavour, simulator, api_key_env="JOBGATE_TEST_NO_SUCH_VARIABLE")
    try:
        with pytest.raises(errors.ProviderRetryable) as caught:
            await provider.call(call(flavour))
        assert caught.value.code == "missing_api_key"
    finally:
        await provider.aclose()
    assert simulator.engine.requests == []
    settings = Settings(
        providers={
            "upstream": ProviderConfig(
                kind=flavour.kind,
                api_key_env="JOBGATE_TEST_NO_SUCH_VARIABLE",
            )
        }
    )
    registry = ProviderRegistry.from_settings(settings, clock=SystemClock())
    try:
        with pytest.raises(errors.ConfigError, match="JOBGATE_TEST_NO_SUCH_VARIABLE"):
            registry.require_credentials()
    finally:
        await registry.aclose()
