"""Classifying provider failures once (calls), Standard Webhooks signatures, and the Anthropic
stream assembler, with hand-made answers (httpx.MockTransport): no network, no clock."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers import calls
from jobgate.providers.anthropic import MESSAGES, AnthropicProvider
from jobgate.providers.base import ProviderCall
from jobgate.wire import standard_webhooks

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def answer(status: int, body: object = None, **headers: str) -> httpx.Response:
    return httpx.Response(status, json=body, headers=headers)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "Tue, 01 Jan 2030 00:00:30 GMT"}, 30.0),
        ({"retry-after": "soon"}, 5.0),
        ({}, 5.0),
        ({"retry-after-ms": "junk", "retry-after": "2"}, 2.0),
    ],
)
def test_retry_after(headers: dict[str, str], expected: float) -> None:
    assert calls.retry_after_s(httpx.Headers(headers), now=NOW, default_s=5.0) == expected


@pytest.mark.parametrize(
    ("status", "headers", "kind"),
    [
        (429, {}, errors.ProviderRateLimited),
        (500, {}, errors.ProviderRetryable),
        (502, {}, errors.ProviderRetryable),
        (529, {}, errors.ProviderRetryable),
        (408, {}, errors.ProviderRetryable),
        (409, {}, errors.ProviderRetryable),
        (400, {}, errors.ProviderFatal),
        (401, {}, errors.ProviderFatal),
        (403, {}, errors.ProviderFatal),
        (404, {}, errors.ProviderFatal),
        (422, {}, errors.ProviderFatal),
        (500, {"x-should-retry": "false"}, errors.ProviderFatal),
        (400, {"x-should-retry": "true"}, errors.ProviderRetryable),
    ],
)
def test_status_classes(status: int, headers: dict[str, str], kind: type) -> None:
    error = calls.classify_status(answer(status, {}, **headers), now=NOW, default_retry_after_s=1)
    assert type(error) is kind and error.status_code == status


def test_error_details_from_both_formats() -> None:
    openai_body = {"error": {"message": "bad model", "type": "invalid_request_error",
                             "code": "model_not_found", "param": "model"}}  # fmt: skip
    anthropic_body = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    assert calls.error_details(answer(404, openai_body)) == ("bad model", "model_not_found")
    assert calls.error_details(answer(529, anthropic_body)) == ("busy", "overloaded_error")
    assert calls.error_details(httpx.Response(502, text="<html>")) == (
        "provider answered HTTP 502", None
    )  # fmt: skip


def test_transport_failures() -> None:
    request = httpx.Request("POST", "http://x")
    refused = calls.classify_transport(httpx.ConnectError("no", request=request), creates=True)
    assert type(refused) is errors.ProviderRetryable and refused.code == "connection_error"
    lost = calls.classify_transport(
        httpx.RemoteProtocolError("gone", request=request), creates=True, safe_to_retry=True
    )
    assert isinstance(lost, errors.ProviderOutcomeUnknown) and lost.safe_to_retry
    slow = calls.classify_transport(httpx.ReadTimeout("slow", request=request), creates=True)
    assert isinstance(slow, errors.ProviderOutcomeUnknown) and not slow.safe_to_retry
    read = calls.classify_transport(httpx.ReadTimeout("slow", request=request), creates=False)
    assert type(read) is errors.ProviderRetryable  # a status check is safe to repeat


def test_sim_directives_move_to_a_header() -> None:
    sent, headers = calls.wire_body({"model": "m", "sim": {"latency_s": 1}})
    assert sent == {"model": "m"} and orjson.loads(headers[calls.SIM_HEADER]) == {"latency_s": 1}
    assert calls.wire_body({"model": "m"}) == ({"model": "m"}, {})


# -- signatures -----------------------------------------------------------------------------

SECRET = "whsec_" + "dGVzdC1zZWNyZXQtZm9yLXNpZ25hdHVyZXM="


def test_signatures_round_trip_and_rotation() -> None:
    body = b'{"id":"evt_1"}'
    headers = standard_webhooks.signed_headers([SECRET], "wh_1", 1_000, body)
    assert standard_webhooks.verify(SECRET, headers, body, now_s=1_000) == "wh_1"
    other = standard_webhooks.sign("whsec_" + "b3RoZXI=", "wh_1", 1_000, body)
    rotated = {**headers, "webhook-signature": f"{other} {headers['webhook-signature']}"}
    assert standard_webhooks.verify(SECRET, rotated, body, now_s=1_100) == "wh_1"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"webhook-signature": "v1,AAAA"}, "no signature matches"),
        ({"webhook-timestamp": "600"}, "window"),
        ({"webhook-timestamp": "1401"}, "window"),
        ({"webhook-timestamp": "x"}, "integer"),
        ({"webhook-id": ""}, "missing"),
    ],
)
def test_signature_rejections(change: dict[str, str], reason: str) -> None:
    body = b"{}"
    headers = {**standard_webhooks.signed_headers([SECRET], "wh_1", 1_000, body), **change}
    with pytest.raises(standard_webhooks.SignatureError, match=reason):
        standard_webhooks.verify(SECRET, headers, body, now_s=1_100)


def test_a_changed_byte_fails_verification() -> None:
    headers = standard_webhooks.signed_headers([SECRET], "wh_1", 1_000, b'{"a":1}')
    with pytest.raises(standard_webhooks.SignatureError):
        standard_webhooks.verify(SECRET, headers, b'{"a":2}', now_s=1_000)


# -- the Anthropic stream assembler ----------------------------------------------------------


def sse(*events: Mapping[str, Any]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: ".encode() + orjson.dumps(e) + b"\n\n" for e in events
    )


def anthropic(stream: bytes, status: int = 200) -> AnthropicProvider:
    def handler(request: httpx.Request) -> httpx.Response:
        assert orjson.loads(request.content)["stream"] is True
        return httpx.Response(status, content=stream, headers={"content-type": "text/event-stream"})

    return AnthropicProvider(
        "claude",
        ProviderConfig(kind="anthropic", base_url="http://anthropic.test"),
        transport=httpx.MockTransport(handler),
    )


CALL = ProviderCall(
    "job_1", "ten_1", MESSAGES,
    {"model": "c", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
    "c", 1, 1, "job_1",
)  # fmt: skip
START: dict[str, Any] = {
    "type": "message_start",
    "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "c",
                "content": [], "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": 9, "output_tokens": 1}},
}  # fmt: skip


async def test_stream_assembles_text_and_tool_use() -> None:
    def text(piece: str) -> dict[str, object]:
        return {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": piece}}  # fmt: skip

    provider = anthropic(
        sse(
            START,
            {"type": "content_block_start", "index": 0,
             "content_block": {"type": "text", "text": ""}},
            text("Hel"),
            text("lo"),
            {"type": "content_block_stop", "index": 0},
            {"type": "content_block_start", "index": 1, "content_block": {
                "type": "tool_use", "id": "tu_1", "name": "get", "input": {}}},
            {"type": "content_block_delta", "index": 1, "delta": {
                "type": "input_json_delta", "partial_json": '{"city": "Par'}},
            {"type": "content_block_delta", "index": 1, "delta": {
                "type": "input_json_delta", "partial_json": 'is"}'}},
            {"type": "content_block_stop", "index": 1},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
             "usage": {"output_tokens": 12}},
            {"type": "message_stop"},
        )
    )  # fmt: skip
    try:
        result = await provider.call(CALL)
    finally:
        await provider.aclose()
    message = result.body
    assert message["content"][0] == {"type": "text", "text": "Hello"}
    assert message["content"][1]["input"] == {"city": "Paris"}
    assert message["stop_reason"] == "tool_use"
    assert (result.usage.input_tokens, result.usage.output_tokens) == (9, 12)


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", errors.ProviderRetryable),
        ("rate_limit_error", errors.ProviderRateLimited),
        ("invalid_request_error", errors.ProviderFatal),
    ],
)
async def test_an_error_event_mid_stream(error_type: str, kind: type) -> None:
    provider = anthropic(
        sse(START, {"type": "error", "error": {"type": error_type, "message": "m"}})
    )
    try:
        with pytest.raises(kind):
            await provider.call(CALL)
    finally:
        await provider.aclose()


async def test_a_stream_that_stops_early_is_an_unknown_outcome() -> None:
    provider = anthropic(sse(START))
    try:
        with pytest.raises(errors.ProviderOutcomeUnknown):
            await provider.call(CALL)
    finally:
        await provider.aclose()


async def test_an_error_status_before_the_stream() -> None:
    body = orjson.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "m"}})
    provider = anthropic(body, status=529)
    try:
        with pytest.raises(errors.ProviderRetryable) as caught:
            await provider.call(CALL)
        assert caught.value.status_code == 529 and caught.value.code == "overloaded_error"
    finally:
        await provider.aclose()
