"""The `openai` adapter, streamed (live output streaming): Chat Completions with `stream: true`
(and `stream_options.include_usage`, so usage comes from the final chunk) assembled into the
`chat.completion` a plain call returns, and the Responses API with `stream: true`, whose
terminal event carries the finished `response`. Text deltas are handed on as they arrive.

Failures are classified as for a plain call; a stream that breaks, or ends without its final
event, after the provider accepted the request is an unknown outcome (the work may be billed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from jobgate import errors
from jobgate.providers import calls
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult, openai_usage
from jobgate.providers.streaming import DeltaSink

if TYPE_CHECKING:
    from jobgate.providers.openai import OpenAIProvider

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


async def chat(provider: OpenAIProvider, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
    options = {**(call.body.get("stream_options") or {}), "include_usage": True}
    body = {**call.body, "stream": True, "stream_options": options}
    state = _ChatAssembly()
    request_ids: list[str | None] = []
    async for data in _events(
        provider, "chat/completions", body, call.idempotency_key, request_ids
    ):
        if data == "[DONE]":
            completion = state.completion()
            return ProviderResult(
                body=completion,
                usage=openai_usage(completion.get("usage")),
                provider_request_id=completion.get("id"),
                request_id=request_ids[0],
            )
        text = state.add(_decode(data))
        if text:
            await on_delta(text)
    raise errors.ProviderOutcomeUnknown("the chat completion stream ended before [DONE]")


async def responses(
    provider: OpenAIProvider, call: ProviderCall, on_delta: DeltaSink
) -> ProviderResult:
    from jobgate.providers.openai import _result_or_raise, response_snapshot

    body = {**call.body, "stream": True}
    request_ids: list[str | None] = []
    async for data in _events(provider, "responses", body, call.idempotency_key, request_ids):
        event = _decode(data)
        kind = event.get("type")
        if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            if event["delta"]:
                await on_delta(event["delta"])
        elif kind in _TERMINAL and isinstance(event.get("response"), dict):
            result = _result_or_raise(response_snapshot(event["response"]))
            return dataclasses.replace(result, request_id=request_ids[0])
        elif kind == "error":
            raise _stream_error(event)
    raise errors.ProviderOutcomeUnknown("the response stream ended before its terminal event")


async def _events(
    provider: OpenAIProvider,
    path: str,
    body: JSONObject,
    idempotency_key: str,
    request_ids: list[str | None],
) -> AsyncIterator[str]:
    """The `data` of each server-sent event of a streamed create; the provider's request id
    is appended to `request_ids` once the answer's headers arrived."""
    sent, headers = calls.wire_body(body)
    headers.update(
        {
            "idempotency-key": idempotency_key,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
    )
    client = provider._client
    request = client.build_request("POST", path, content=orjson.dumps(sent), headers=headers)
    try:
        response = await client.send(request, stream=True)
    except httpx.TransportError as exc:
        raise calls.classify_transport(
            exc, creates=True, safe_to_retry=provider.idempotent_creates
        ) from exc
    try:
        if not response.is_success:
            await response.aread()
            raise calls.classify_status(
                response,
                now=provider._clock.now(),
                default_retry_after_s=provider._config.retry_after_default_s,
            )
        request_ids.append(calls.request_id(response.headers))
        async for _event, data in calls.server_sent_events(response):
            yield data
    except httpx.TransportError as exc:
        # Accepted and answering: whatever it did is billed, its outcome unknown.
        raise errors.ProviderOutcomeUnknown(
            f"the stream broke: {type(exc).__name__}", safe_to_retry=provider.idempotent_creates
        ) from exc
    finally:
        await response.aclose()


def _decode(data: str) -> JSONObject:
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise errors.ProviderOutcomeUnknown("the event stream carried invalid JSON") from exc
    if not isinstance(payload, dict):
        raise errors.ProviderOutcomeUnknown("the event stream carried a non-object event")
    if isinstance(payload.get("error"), dict) and "choices" not in payload:
        raise _stream_error(payload["error"])
    return payload


def _stream_error(error: JSONObject) -> errors.ProviderError:
    code = str(error.get("code") or error.get("type") or "server_error")
    message = str(error.get("message") or "the provider reported an error mid-stream")[:500]
    if code in ("rate_limit_exceeded", "rate_limit_error"):
        return errors.ProviderRateLimited(message, retry_after_s=0.0, status_code=None)
    if code in ("server_error", "overloaded_error", "internal_error"):
        return errors.ProviderRetryable(message, code=code)
    return errors.ProviderFatal(message, code=code)


class _ChatAssembly:
    """A `chat.completion` rebuilt from its chunks: the first choice's text, refusal and
    tool calls, the finish reason, and the usage chunk."""

    def __init__(self) -> None:
        self.head: JSONObject = {}
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, JSONObject] = {}
        self.finish_reason: str | None = None
        self.usage: JSONObject | None = None

    def add(self, chunk: JSONObject) -> str:
        """Take one chunk in; answer its text delta."""
        if not self.head:
            self.head = {
                key: chunk.get(key)
                for key in ("id", "created", "model", "system_fingerprint", "service_tier")
            }
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices") or []
        first = next((c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), None)
        if first is None:
            return ""
        self.finish_reason = first.get("finish_reason") or self.finish_reason
        delta = first.get("delta") or {}
        for call in delta.get("tool_calls") or []:
            self._tool_call(call)
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.text.append(text)
            return text
        return ""

    def _tool_call(self, part: Any) -> None:
        if not isinstance(part, dict):
            return
        index = int(part.get("index") or 0)
        call = self.tool_calls.setdefault(
            index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
        )
        call["id"] = part.get("id") or call["id"]
        function = part.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""

    def completion(self) -> JSONObject:
        message: JSONObject = {
            "role": "assistant",
            "content": "".join(self.text) if self.text or not self.tool_calls else None,
            "refusal": "".join(self.refusal) or None,
            "annotations": [],
        }
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return {
            **self.head,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": self.finish_reason or "stop",
                    "logprobs": None,
                }
            ],
            "usage": self.usage,
        }
