"""Errors a provider reports inside a 200's event stream, as the real APIs send them (fake
upstreams over httpx.MockTransport), classified as the same fault answered as an HTTP status
would be: transient faults are retryable, rate limits wait for the reset the error names,
quota and spend limits fail the job by their code. Payloads are checked against the official
SDKs' types where they have one. Sources: docs/providers.md."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from anthropic.types.shared import ErrorDetails, ErrorResponse
from openai.types.responses import ResponseErrorEvent
from openai.types.shared import ErrorObject

from jobgate import errors
from jobgate.providers.base import ProviderCall
from jobgate.providers.openai import CHAT_COMPLETIONS, RESPONSES
from jobgate.providers.streaming import StreamingProvider
from jobgate.testing import FakeClock
from tests.providers import upstreams
from tests.providers.sdk import anthropic_strict, openai_strict
from tests.providers.upstreams import Upstream

pytestmark = pytest.mark.asyncio
NOW = datetime(2030, 1, 1, tzinfo=UTC)
TPM_MESSAGE = (
    "Rate limit reached for gpt-4.1-mini in organization org-abc on tokens per min (TPM): "
    "Limit 30000, Used 29500, Requested 1200. Please try again in 6.57s. Visit "
    "https://platform.openai.com/account/rate-limits to learn more."
)
NESTED_HEADERS = {
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-limit-tokens": "30000",
    "x-ratelimit-remaining-requests": "499",
    "x-ratelimit-remaining-tokens": "0",
    "x-ratelimit-reset-requests": "120ms",
    "x-ratelimit-reset-tokens": "50.529s",
}


def _call(endpoint: str, body: dict[str, Any]) -> ProviderCall:
    return ProviderCall("job_1", "ten_1", endpoint, body, body["model"], 1, 1, "job_1")


CHAT_CALL = _call(
    CHAT_COMPLETIONS,
    {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "hi"}]},
)
RESPONSES_CALL = _call(RESPONSES, {"model": "gpt-4.1-mini", "input": "hi"})
MESSAGES_CALL = _call(
    "/v1/messages",
    {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
)


async def _nothing(_: str) -> None:
    pass


async def _raised(provider: StreamingProvider, call: ProviderCall) -> errors.ProviderError:
    with pytest.raises(errors.ProviderError) as caught:
        await provider.stream(call, _nothing)
    return caught.value


# -- how each API writes an error into its stream ----------------------------------------------


def _openai_error(error: dict[str, Any]) -> None:
    """An OpenAI error object is the SDK's (its nested rate-limit `headers` aside: the SDK
    keeps the whole body, the schema does not name them)."""
    openai_strict(ErrorObject, {k: v for k, v in error.items() if k != "headers"})


def chat_error(error: dict[str, Any]) -> bytes:
    """Chat Completions: a `data:` event whose object holds `error` (the SDK raises on it)."""
    _openai_error(error)
    start = upstreams.chat_chunk("partial ", role="assistant")
    return upstreams.openai_sse([start, {"error": error}])


def responses_error(event: dict[str, Any]) -> bytes:
    """Responses: the flat `error` event (ResponseErrorEvent), or one nesting the error object
    as Chat Completions does (the SDK raises on either)."""
    numbered = {**event, "type": "error", "sequence_number": 1}
    if isinstance(event.get("error"), dict):
        _openai_error(event["error"])
    else:
        openai_strict(ResponseErrorEvent, numbered)
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []},
    }
    return upstreams.typed_sse([created, numbered])


MESSAGE_START: dict[str, Any] = {
    "type": "message_start",
    "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 1},
    },
}  # fmt: skip


def messages_error(error: dict[str, Any]) -> bytes:
    """Anthropic: `event: error` with `{"type": "error", "error": {...}}`."""
    _anthropic_error(error)
    return upstreams.typed_sse([MESSAGE_START, {"type": "error", "error": error}])


def _anthropic_error(error: dict[str, Any]) -> None:
    """An Anthropic error is the SDK's, its `details` too (read apart by the SDK)."""
    bare = {k: v for k, v in error.items() if k != "details"}
    anthropic_strict(ErrorResponse, {"type": "error", "error": bare, "request_id": "req_1"})
    if "details" in error:
        anthropic_strict(ErrorDetails, error["details"])  # type: ignore[arg-type]


Streamer = Callable[[Upstream, FakeClock], StreamingProvider]


def _openai(upstream: Upstream, clock: FakeClock) -> StreamingProvider:
    return upstream.openai(clock)


def _anthropic(upstream: Upstream, clock: FakeClock) -> StreamingProvider:
    return upstream.anthropic(clock)


async def _classify(
    body: bytes, call: ProviderCall, streamer: Streamer, **headers: str
) -> errors.ProviderError:
    clock = FakeClock(NOW)
    upstream = Upstream(upstreams.stream(body, **headers))
    return await _raised(streamer(upstream, clock), call)


# -- transient faults are retried, as an HTTP 503 would be -------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        {"message": "The server is overloaded", "type": "service_unavailable_error",
         "param": None, "code": None},
        {"message": "Too many requests", "type": "server_error", "param": None,
         "code": "too_many_requests"},
        {"message": "The server had an error while processing your request.",
         "type": "server_error", "param": None, "code": None},
    ],
)  # fmt: skip
async def test_a_transient_chat_error_is_retryable(error: dict[str, Any]) -> None:
    found = await _classify(chat_error(error), CHAT_CALL, _openai)
    assert type(found) is errors.ProviderRetryable, found


@pytest.mark.parametrize(
    "event",
    [
        {"code": None, "message": "An error occurred while processing your request.",
         "param": None},
        {"code": "server_error", "message": "m", "param": None},
        {"error": {"type": "service_unavailable_error", "code": None, "message": "m"}},
    ],
)  # fmt: skip
async def test_a_transient_responses_error_is_retryable(event: dict[str, Any]) -> None:
    found = await _classify(responses_error(event), RESPONSES_CALL, _openai)
    assert type(found) is errors.ProviderRetryable, found


@pytest.mark.parametrize("kind", ["overloaded_error", "api_error", "timeout_error"])
async def test_a_transient_messages_error_is_retryable(kind: str) -> None:
    found = await _classify(
        messages_error({"type": kind, "message": "Overloaded"}), MESSAGES_CALL, _anthropic
    )
    assert type(found) is errors.ProviderRetryable and found.code == kind


async def test_an_invalid_request_mid_stream_stays_fatal() -> None:
    error = {"type": "invalid_request_error", "code": "context_length_exceeded",
             "message": "too long", "param": "messages"}  # fmt: skip
    found = await _classify(chat_error(error), CHAT_CALL, _openai)
    assert type(found) is errors.ProviderFatal and found.code == "context_length_exceeded"


# -- rate limits wait for the reset they name --------------------------------------------------


async def test_a_chat_rate_limit_waits_for_the_nested_reset() -> None:
    error = {"type": "tokens", "code": "rate_limit_exceeded", "message": TPM_MESSAGE,
             "param": None, "headers": NESTED_HEADERS}  # fmt: skip
    found = await _classify(chat_error(error), CHAT_CALL, _openai)
    assert isinstance(found, errors.ProviderRateLimited)
    assert found.retry_after_s == pytest.approx(50.529)  # the exhausted limit's reset


async def test_a_rate_limit_without_headers_waits_what_its_message_says() -> None:
    error = {"type": "tokens", "code": "rate_limit_exceeded", "message": TPM_MESSAGE,
             "param": None}  # fmt: skip
    found = await _classify(chat_error(error), CHAT_CALL, _openai)
    assert isinstance(found, errors.ProviderRateLimited)
    assert found.retry_after_s == pytest.approx(6.57)


@pytest.mark.parametrize(
    "event",
    [
        {"code": "rate_limit_exceeded", "message": TPM_MESSAGE, "param": None},
        {"error": {"type": "tokens", "code": "rate_limit_exceeded", "message": TPM_MESSAGE,
                   "param": None, "headers": NESTED_HEADERS}},
    ],
)  # fmt: skip
async def test_a_responses_rate_limit_waits_for_its_reset(event: dict[str, Any]) -> None:
    found = await _classify(responses_error(event), RESPONSES_CALL, _openai)
    assert isinstance(found, errors.ProviderRateLimited)
    assert found.retry_after_s >= 6.57


async def test_a_failed_response_rate_limited_waits_for_its_reset() -> None:
    failed = {
        "type": "response.failed",
        "sequence_number": 1,
        "response": {
            "id": "resp_1", "object": "response", "status": "failed", "output": [],
            "error": {"code": "rate_limit_exceeded", "message": TPM_MESSAGE},
        },
    }  # fmt: skip
    found = await _classify(upstreams.typed_sse([failed]), RESPONSES_CALL, _openai)
    assert isinstance(found, errors.ProviderRateLimited)
    assert found.retry_after_s == pytest.approx(6.57)


async def test_a_messages_rate_limit_waits_for_the_exhausted_limits_reset() -> None:
    reset = (NOW + timedelta(seconds=42)).isoformat().replace("+00:00", "Z")
    later = (NOW + timedelta(seconds=59)).isoformat().replace("+00:00", "Z")
    found = await _classify(
        messages_error({"type": "rate_limit_error", "message": "output tokens per minute"}),
        MESSAGES_CALL,
        _anthropic,
        **{
            "anthropic-ratelimit-output-tokens-remaining": "0",
            "anthropic-ratelimit-output-tokens-reset": reset,
            "anthropic-ratelimit-requests-remaining": "40",
            "anthropic-ratelimit-requests-reset": later,
        },
    )
    assert isinstance(found, errors.ProviderRateLimited)
    assert found.retry_after_s == pytest.approx(42)


async def test_a_messages_rate_limit_saying_nothing_waits_the_default() -> None:
    found = await _classify(
        messages_error({"type": "rate_limit_error", "message": "Rate limited"}),
        MESSAGES_CALL,
        _anthropic,
    )
    assert isinstance(found, errors.ProviderRateLimited)
    assert found.retry_after_s == 5.0  # retry_after_default_s, never 0


# -- quota and spend limits by their code ------------------------------------------------------


@pytest.mark.parametrize("code", ["insufficient_quota", "credit_balance_exhausted"])
async def test_an_openai_quota_error_mid_stream_is_quota(code: str) -> None:
    error = {"type": "insufficient_quota", "code": code, "param": None,
             "message": "You exceeded your current quota."}  # fmt: skip
    chat = await _classify(chat_error(error), CHAT_CALL, _openai)
    assert isinstance(chat, errors.ProviderQuotaExceeded) and chat.code == code
    flat = {"code": code, "message": "m", "param": None}
    responses = await _classify(responses_error(flat), RESPONSES_CALL, _openai)
    assert isinstance(responses, errors.ProviderQuotaExceeded) and responses.code == code


@pytest.mark.parametrize("code", ["enforced_spend_limit_reached", "contract_spend_limit_reached"])
async def test_an_anthropic_spend_limit_is_quota_by_its_code(code: str) -> None:
    error = {"type": "rate_limit_error", "message": "Rate limited",
             "details": {"error_code": code}}  # fmt: skip
    mid_stream = await _classify(messages_error(error), MESSAGES_CALL, _anthropic)
    assert isinstance(mid_stream, errors.ProviderQuotaExceeded) and mid_stream.code == code
    body = {"type": "error", "error": error, "request_id": "req_1"}
    _anthropic_error(error)
    upstream = Upstream(upstreams.status(429, body))
    answered = await _raised(upstream.anthropic(FakeClock(NOW)), MESSAGES_CALL)
    assert isinstance(answered, errors.ProviderQuotaExceeded) and answered.code == code
    assert answered.status_code == 429


async def test_the_anthropic_usage_limit_400_is_quota() -> None:
    error = {
        "type": "invalid_request_error",
        "message": "You have reached your specified API usage limits. You will regain access "
        "on 2030-02-01 at 00:00 UTC.",
    }
    _anthropic_error(error)
    body = {"type": "error", "error": error, "request_id": "req_1"}
    upstream = Upstream(upstreams.status(400, body))
    found = await _raised(upstream.anthropic(FakeClock(NOW)), MESSAGES_CALL)
    assert isinstance(found, errors.ProviderQuotaExceeded) and found.status_code == 400


# -- a stream that goes silent has stalled ---------------------------------------------------


@pytest.mark.parametrize(
    ("call", "head"),
    [
        (CHAT_CALL, upstreams.openai_sse([upstreams.chat_chunk("half ", role="assistant")],
                                         done=False)),
        (RESPONSES_CALL, upstreams.typed_sse([{"type": "response.created", "sequence_number": 0,
                                               "response": {"id": "resp_1", "status": "queued"}}])),
        (MESSAGES_CALL, upstreams.typed_sse([MESSAGE_START, {"type": "ping"}])),
    ],
    ids=["chat", "responses", "messages"],
)  # fmt: skip
async def test_a_silent_stream_stalls_as_a_retryable_timeout(
    call: ProviderCall, head: bytes
) -> None:
    stall = upstreams.Stall(head)
    upstream = Upstream(stall)
    provider = upstream.anthropic() if call is MESSAGES_CALL else upstream.openai()
    started = asyncio.get_running_loop().time()
    with pytest.raises(errors.ProviderRetryable) as caught:
        await provider.stream(dataclasses.replace(call, stall_timeout_s=0.2), _nothing)
    assert caught.value.code == "stream_stalled"
    assert stall.waiting.is_set()  # silent after the head, not before it
    assert asyncio.get_running_loop().time() - started < 5  # not the 600 s read timeout
    await provider.aclose()


async def test_a_stream_that_keeps_sending_never_stalls() -> None:
    body = upstreams.openai_sse(upstreams.chat_text("a", "b"))
    provider = Upstream(upstreams.stream(body)).openai()
    call = dataclasses.replace(CHAT_CALL, stall_timeout_s=0.2)
    result = await provider.stream(call, _nothing)
    assert result.body["choices"][0]["message"]["content"] == "ab"
