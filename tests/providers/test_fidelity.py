"""Behaviours of the real OpenAI and Anthropic APIs that are less kind than a simulator would be
with hand-made answers (httpx.MockTransport): quota 429s, rate-limit reset headers,
`x-should-retry`, request ids, prompt-cache usage and its prices. Each source is listed in
docs/providers.md."""

from __future__ import annotations

import types
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from jobgate import errors
from jobgate.config import ProviderConfig, Settings
from jobgate.domain import costs, verdicts
from jobgate.providers import calls, gates, rate_limit_waits
from jobgate.providers.anthropic import BATCHES, AnthropicProvider
from jobgate.providers.background import ProviderJobRef, Snapshot, Status
from jobgate.providers.base import anthropic_usage, openai_usage
from jobgate.testing import FakeClock
from tests.providers.test_classification import CALL, START, anthropic, sse

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def answer(status: int, body: object = None, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


def classify(response: httpx.Response) -> errors.ProviderError:
    return calls.classify_status(response, now=NOW, default_retry_after_s=5.0)


# -- quota and billing 429s -------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        # OpenAI: https://platform.openai.com/docs/guides/error-codes (429 "You exceeded your
        # current quota"), with the code in both `type` and `code`
        {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                   "param": None, "code": "insufficient_quota"}},
        {"error": {"message": "spend limit", "type": "insufficient_quota", "param": None,
                   "code": "organization_spend_limit_exceeded"}},
        {"error": {"message": "spend limit", "type": "insufficient_quota", "param": None,
                   "code": "project_spend_limit_exceeded"}},
        # Anthropic: a plain rate_limit_error whose message names the spend limit
        {"type": "error", "error": {"type": "rate_limit_error", "message":
         "This request would exceed your account's monthly spend limit."}},
    ],
)  # fmt: skip
def test_a_quota_429_is_fatal_not_a_rate_limit(body: dict[str, object]) -> None:
    error = classify(answer(429, body, **{"retry-after": "5"}))
    assert isinstance(error, errors.ProviderQuotaExceeded)
    assert isinstance(error, errors.ProviderFatal)  # fails the job, never requeued
    assert error.code in calls.QUOTA_CODES and error.status_code == 429


def test_an_ordinary_429_is_still_a_rate_limit() -> None:
    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}}
    assert isinstance(classify(answer(429, body)), errors.ProviderRateLimited)


def test_a_quota_failure_fails_the_job_with_a_clear_code() -> None:
    job = types.SimpleNamespace(
        id="job_1", lease_token="lt", attempt=1, max_attempts=3, run_count=1
    )
    exc = classify(
        answer(
            429,
            {
                "error": {
                    "message": "quota",
                    "type": "insufficient_quota",
                    "code": "insufficient_quota",
                }
            },
            **{"x-request-id": "req_quota"},
        )
    )
    finish = verdicts.failed(
        job,  # type: ignore[arg-type]
        exc,
        actor="w",
        retry_delay=lambda _: 0.0,
        unknown_outcome="fail",
    )
    assert finish.state.value == "failed" and finish.reason == "fatal_error"
    assert finish.count_attempt  # not an uncounted requeue every 5 s
    assert finish.error is not None
    assert finish.error["code"] == "insufficient_quota"
    assert finish.error["type"] == "insufficient_quota"
    assert finish.error["request_id"] == "req_quota"


def test_a_quota_error_alerts_and_does_not_pause_the_provider() -> None:
    clock = FakeClock()
    registry = gates.ProviderGates({"oai": ProviderConfig(kind="openai")}, clock=clock)
    labels = {"provider": "oai", "code": "insufficient_quota"}
    before = REGISTRY.get_sample_value("jobgate_provider_quota_errors_total", labels) or 0.0
    quota = errors.ProviderQuotaExceeded("quota", code="insufficient_quota", status_code=429)
    registry.record("oai", "job_1", quota)
    after = REGISTRY.get_sample_value("jobgate_provider_quota_errors_total", labels)
    assert after == before + 1
    gate = registry.gate("oai")
    assert gate is not None and gate.breaker.admits(4) == 4  # other models keep flowing


def test_a_rate_limit_holds_back_the_provider_briefly_not_for_the_whole_reset() -> None:
    """A 6-minute token reset makes that job wait 6 minutes, but the provider's other models
    (limits are per model) are held back at most `rate_limit_pause_max_s`."""
    clock = FakeClock()
    config = ProviderConfig(kind="openai", rate_limit_pause_max_s=20)
    registry = gates.ProviderGates({"oai": config}, clock=clock)
    limited = errors.ProviderRateLimited("slow down", retry_after_s=360)
    registry.record("oai", "job_1", limited)
    gate = registry.gate("oai")
    assert gate is not None and gate.breaker.admits(4) == 0
    clock.advance(20)
    assert gate.breaker.admits(4) == 4


# -- reset headers and x-should-retry -----------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # OpenAI https://platform.openai.com/docs/guides/rate-limits (durations)
        ({"x-ratelimit-reset-requests": "6m0s", "x-ratelimit-remaining-requests": "0"}, 360.0),
        ({"x-ratelimit-reset-tokens": "1s", "x-ratelimit-remaining-tokens": "0"}, 1.0),
        ({"x-ratelimit-reset-tokens": "20ms", "x-ratelimit-remaining-tokens": "0"}, 0.02),
        ({"x-ratelimit-reset-requests": "1h2m3.5s"}, 3723.5),
        # the exhausted limit decides, not the longest
        (
            {
                "x-ratelimit-reset-requests": "6m0s",
                "x-ratelimit-remaining-requests": "12",
                "x-ratelimit-reset-tokens": "7s",
                "x-ratelimit-remaining-tokens": "0",
            },
            7.0,
        ),
        # Anthropic https://docs.anthropic.com/en/api/rate-limits (RFC 3339 times)
        (
            {
                "anthropic-ratelimit-tokens-reset": "2030-01-01T00:02:00Z",
                "anthropic-ratelimit-tokens-remaining": "0",
                "anthropic-ratelimit-requests-reset": "2030-01-01T00:00:01Z",
                "anthropic-ratelimit-requests-remaining": "40",
            },
            120.0,
        ),
        ({"anthropic-ratelimit-input-tokens-reset": "2030-01-01T00:00:30+00:00"}, 30.0),
        ({"anthropic-ratelimit-requests-reset": "2029-12-31T23:59:00Z"}, 0.0),  # past: now
        # retry-after still wins when sent
        ({"retry-after": "3", "x-ratelimit-reset-requests": "6m0s"}, 3.0),
        # unreadable: the default
        ({"x-ratelimit-reset-requests": "soon"}, 5.0),
        ({"anthropic-ratelimit-requests-reset": "tomorrow"}, 5.0),
    ],
)
def test_reset_headers(headers: dict[str, str], expected: float) -> None:
    waited = calls.retry_after_s(httpx.Headers(headers), now=NOW, default_s=5.0)
    assert waited == pytest.approx(expected)


@given(st.text(max_size=40))
def test_any_duration_text_parses_or_is_refused(raw: str) -> None:
    parsed = calls.parse_duration_s(raw)
    assert parsed is None or parsed >= 0


@given(
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=59),
    st.integers(min_value=0, max_value=999),
)
def test_durations_as_go_writes_them(minutes: int, seconds: int, millis: int) -> None:
    text = f"{minutes}m{seconds}.{millis:03d}s"
    assert calls.parse_duration_s(text) == pytest.approx(minutes * 60 + seconds + millis / 1000)


@given(
    st.dictionaries(st.sampled_from([h for h, _, _ in rate_limit_waits._RESET_HEADERS]), st.text())
)
def test_any_reset_header_value_gives_a_bounded_wait(headers: dict[str, str]) -> None:
    clean = {k: v for k, v in headers.items() if v.isprintable() and v.isascii()}
    waited = calls.retry_after_s(httpx.Headers(clean), now=NOW, default_s=5.0)
    assert 0 <= waited <= calls.MAX_RETRY_AFTER_S


def test_a_far_future_reset_is_believed_for_a_day_at_most() -> None:
    far = (NOW + timedelta(days=30)).isoformat()
    waited = calls.retry_after_s(
        httpx.Headers({"anthropic-ratelimit-requests-reset": far}), now=NOW, default_s=5.0
    )
    assert waited == calls.MAX_RETRY_AFTER_S


def test_x_should_retry_false_wins_over_a_429() -> None:
    """openai-python and anthropic-sdk-python `_base_client._should_retry` read the header
    before the status: `false` means no retry, even for 429."""
    body = {"error": {"message": "no", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}
    error = classify(answer(429, body, **{"x-should-retry": "false", "retry-after": "1"}))
    assert type(error) is errors.ProviderFatal and error.code == "rate_limit_exceeded"
    assert type(classify(answer(429, {}, **{"x-should-retry": "true"}))) is (
        errors.ProviderRateLimited
    )


@pytest.mark.parametrize(("header", "value"), [("x-request-id", "req_o"), ("request-id", "req_a")])
def test_the_request_id_travels_with_the_error(header: str, value: str) -> None:
    assert classify(answer(500, {}, **{header: value})).request_id == value


# -- prompt caching: usage and prices ----------------------------------------------------------

CACHED: dict[str, Any] = {
    "input_tokens": 10,
    "output_tokens": 1,
    "cache_creation_input_tokens": 200,
    "cache_read_input_tokens": 3000,
}


async def test_anthropic_messages_usage_counts_cache_reads_and_writes() -> None:
    start = {**START, "message": {**START["message"], "usage": CACHED}}
    provider = anthropic(
        sse(
            start,
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"output_tokens": 7}},
            {"type": "message_stop"},
        )
    )  # fmt: skip
    try:
        result = await provider.call(CALL)
    finally:
        await provider.aclose()
    assert result.usage.input_tokens == 3210  # it was 10
    assert result.usage.cache_read_input_tokens == 3000
    assert result.usage.cache_creation_input_tokens == 200
    assert result.usage.as_dict()["cache_read_input_tokens"] == 3000


async def test_anthropic_batch_usage_counts_cache_reads_and_writes() -> None:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "c",
        "content": [],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": CACHED,
    }
    lines = b"".join(
        orjson.dumps({"custom_id": f"r{i}", "result": {"type": "succeeded", "message": message}})
        + b"\n"
        for i in range(2)
    )  # fmt: skip

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=lines)

    provider = AnthropicProvider(
        "claude",
        ProviderConfig(kind="anthropic", base_url="http://anthropic.test"),
        transport=httpx.MockTransport(handler),
    )
    try:
        ref = ProviderJobRef("job_1", "msgbatch_1", BATCHES, None)
        snapshot = Snapshot("msgbatch_1", Status.COMPLETED, {}, needs_result=True)
        result = await provider.fetch_result(ref, snapshot)
    finally:
        await provider.aclose()
    assert result.usage.input_tokens == 2 * 3210
    assert result.usage.cache_read_input_tokens == 6000
    assert result.usage.cache_creation_input_tokens == 400


def test_usage_readers_never_trust_odd_values() -> None:
    odd = {"input_tokens": -5, "output_tokens": True, "cache_read_input_tokens": "9"}
    assert anthropic_usage(odd).input_tokens == 0
    assert anthropic_usage(None).as_dict()["total_tokens"] == 0
    openai = {"input_tokens": 100, "output_tokens": 2,
              "input_tokens_details": {"cached_tokens": 80}}  # fmt: skip
    counted = openai_usage(openai)
    assert (counted.input_tokens, counted.cache_read_input_tokens) == (100, 80)


def test_cache_reads_and_writes_are_priced_as_the_provider_bills_them() -> None:
    """Anthropic: cache reads 0.1x, 5-minute writes 1.25x the input price
    (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching#pricing)."""
    price = costs.Price(
        Decimal(3),
        Decimal(15),
        cache_read_per_mtok=Decimal("0.30"),
        cache_write_per_mtok=Decimal("3.75"),
    )
    usage = anthropic_usage(CACHED)
    cost = costs.cost_usd(
        price,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
        cache_write_tokens=usage.cache_creation_input_tokens,
    )
    expected = (10 * 3 + 3000 * Decimal("0.30") + 200 * Decimal("3.75") + 1 * 15) / 1_000_000
    assert cost == expected
    plain = costs.Price(Decimal(3), Decimal(15))  # no cache prices: priced as input
    assert costs.cost_usd(
        plain, input_tokens=3210, output_tokens=1, cache_read_tokens=3000, cache_write_tokens=200
    ) == (3210 * 3 + 15) / Decimal(1_000_000)


def test_cache_prices_are_configurable() -> None:
    settings = Settings(
        providers={
            "claude": ProviderConfig(
                kind="anthropic",
                prices={
                    "*": {
                        "input_per_mtok": 3,
                        "output_per_mtok": 15,
                        "cache_read_per_mtok": 0.3,
                        "cache_write_per_mtok": 3.75,
                    }
                },
            )
        }
    )
    price = settings.prices()["claude"]["*"]
    assert price.cache_read_per_mtok == Decimal("0.3")
    assert price.cache_write_per_mtok == Decimal("3.75")


def test_a_failed_background_response_over_quota_is_a_quota_error() -> None:
    from jobgate.providers.response_snapshots import response_snapshot

    failed = response_snapshot(
        {"id": "resp_1", "status": "failed",
         "error": {"code": "insufficient_quota", "message": "You exceeded your current quota"}}
    )  # fmt: skip
    assert isinstance(failed.error, errors.ProviderQuotaExceeded)


async def test_a_spend_limit_error_mid_stream_is_a_quota_error() -> None:
    provider = anthropic(
        sse(
            START,
            {"type": "error", "error": {"type": "rate_limit_error",
             "message": "This request would exceed your account's monthly spend limit."}},
        )
    )  # fmt: skip
    try:
        with pytest.raises(errors.ProviderQuotaExceeded):
            await provider.call(CALL)
    finally:
        await provider.aclose()
