"""The `openai` adapter, streamed (live output streaming): Chat Completions with `stream: true`
(and `stream_options.include_usage`, so usage comes from the final chunk) assembled into the
`chat.completion` a plain call returns, every choice and its logprobs included; and the
Responses API with `stream: true`, whose terminal event carries the finished `response`. The
first choice's text deltas are handed on as they arrive.

Failures are classified as for a plain call; an error the provider reports inside the stream
by its code (providers.error_codes), as the official SDK raises it: a Chat Completions event
holding `error`, a Responses `error` event (flat, or nesting the error object), or
`response.failed`. A stream that breaks, or ends without its final event, after the provider
accepted the request is an unknown outcome (the work may be billed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from jobgate import errors
from jobgate.providers import calls, error_codes
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult, openai_usage
from jobgate.providers.response_snapshots import response_snapshot
from jobgate.providers.streaming import DeltaSink

if TYPE_CHECKING:
    from jobgate.providers.openai import OpenAIProvider

_FINISHED = ("response.completed", "response.incomplete")


@dataclasses.dataclass(slots=True)
class _Answer:
    """What the answer's head said: its headers (rate-limit state) and request id."""

    headers: httpx.Headers = dataclasses.field(default_factory=httpx.Headers)
    request_id: str | None = None


async def chat(provider: OpenAIProvider, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
    options = {**(call.body.get("stream_options") or {}), "include_usage": True}
    body = {**call.body, "stream": True, "stream_options": options}
    state = _ChatAssembly()
    answer = _Answer()
    async for _, data in _events(provider, call, "chat/completions", body, answer):
        if data == "[DONE]":
            completion = state.completion()
            return ProviderResult(
                body=completion,
                usage=openai_usage(completion.get("usage")),
                provider_request_id=completion.get("id"),
                request_id=answer.request_id,
            )
        chunk = _decode(provider, data)
        if chunk.get("error"):  # as the SDK raises on it
            raise _stream_error(provider, chunk["error"], answer)
        text = state.add(chunk)
        if text:
            await on_delta(text)
    raise _ended_early(provider, "the chat completion stream ended before [DONE]")


async def responses(
    provider: OpenAIProvider, call: ProviderCall, on_delta: DeltaSink
) -> ProviderResult:
    body = {**call.body, "stream": True}
    answer = _Answer()
    async for _, data in _events(provider, call, "responses", body, answer):
        event = _decode(provider, data)
        kind = event.get("type")
        if kind == "response.output_text.delta" and isinstance(event.get("delta"), str):
            if event["delta"]:
                await on_delta(event["delta"])
        elif kind in _FINISHED and isinstance(event.get("response"), dict):
            snapshot = response_snapshot(event["response"])
            if snapshot.result is not None:
                return dataclasses.replace(snapshot.result, request_id=answer.request_id)
        elif kind == "response.failed" and isinstance(event.get("response"), dict):
            raise _stream_error(provider, event["response"].get("error"), answer)
        elif kind == "error" or event.get("error"):
            # The `error` event names its code flat (ResponseErrorEvent), or nests the error
            # object as Chat Completions does; the SDK raises on either.
            nested = event.get("error")
            flat = {"code": event.get("code"), "message": event.get("message")}
            raise _stream_error(provider, nested if isinstance(nested, dict) else flat, answer)
    raise _ended_early(provider, "the response stream ended before its terminal event")


async def _events(
    provider: OpenAIProvider,
    call: ProviderCall,
    path: str,
    body: JSONObject,
    answer: _Answer,
) -> AsyncIterator[tuple[str, str]]:
    """The (event, data) of each server-sent event of a streamed create; `answer` holds the
    answer's head once it arrived."""
    sent, headers = calls.wire_body(body)
    headers.update(
        {
            "idempotency-key": call.idempotency_key,
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
        answer.headers = response.headers
        answer.request_id = calls.request_id(response.headers)
        async for event in calls.server_sent_events(response, stall_timeout_s=call.stall_timeout_s):
            yield event
    except httpx.TransportError as exc:
        # Accepted and answering: whatever it did is billed, its outcome unknown.
        raise errors.ProviderOutcomeUnknown(
            f"the stream broke: {type(exc).__name__}", safe_to_retry=provider.idempotent_creates
        ) from exc
    except errors.ProviderError as exc:
        exc.request_id = exc.request_id or answer.request_id
        raise
    finally:
        await response.aclose()


def _decode(provider: OpenAIProvider, data: str) -> JSONObject:
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _ended_early(provider, "the event stream carried invalid JSON") from exc
    if not isinstance(payload, dict):
        raise _ended_early(provider, "the event stream carried a non-object event")
    return payload


def _stream_error(provider: OpenAIProvider, error: Any, answer: _Answer) -> errors.ProviderError:
    found = error_codes.stream_error(
        error,
        response_headers=answer.headers,
        now=provider._clock.now(),
        default_retry_after_s=provider._config.retry_after_default_s,
    )
    found.request_id = answer.request_id
    return found


def _ended_early(provider: OpenAIProvider, message: str) -> errors.ProviderOutcomeUnknown:
    """A stream cut short after the provider accepted the request: its outcome is unknown, a
    retry safe only where the provider deduplicates by our idempotency key."""
    return errors.ProviderOutcomeUnknown(message, safe_to_retry=provider.idempotent_creates)


class _ChatAssembly:
    """A `chat.completion` rebuilt from its chunks: every choice's text, refusal, tool calls,
    logprobs and finish reason, and the usage chunk."""

    def __init__(self) -> None:
        self.head: JSONObject = {}
        self.choices: dict[int, _Choice] = {}
        self.usage: JSONObject | None = None

    def add(self, chunk: JSONObject) -> str:
        """Take one chunk in; answer the first choice's text delta."""
        if not self.head:
            self.head = {
                key: chunk.get(key)
                for key in ("id", "created", "model", "system_fingerprint", "service_tier")
            }
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        text = ""
        for part in chunk.get("choices") or []:
            if not isinstance(part, dict):
                continue
            index = part.get("index", 0)
            index = index if isinstance(index, int) else 0
            added = self.choices.setdefault(index, _Choice()).add(part)
            if index == 0:
                text = added
        return text

    def completion(self) -> JSONObject:
        choices = [self.choices[i].whole(i) for i in sorted(self.choices)] or [_Choice().whole(0)]
        return {
            **self.head,
            "object": "chat.completion",
            "choices": choices,
            "usage": self.usage,
        }


class _Choice:
    """One choice, from the deltas of its index."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.tool_calls: dict[int, JSONObject] = {}
        self.finish_reason: str | None = None
        # logprobs member -> tokens so far; None until a chunk carried logprobs at all.
        self.logprobs: dict[str, list[Any] | None] | None = None

    def add(self, part: JSONObject) -> str:
        """Take one choice delta in; answer its text."""
        self.finish_reason = part.get("finish_reason") or self.finish_reason
        self._logprobs(part.get("logprobs"))
        delta = part.get("delta") or {}
        for call in delta.get("tool_calls") or []:
            self._tool_call(call)
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
        text = delta.get("content")
        if isinstance(text, str) and text:
            self.text.append(text)
            return text
        return ""

    def _logprobs(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            return
        if self.logprobs is None:
            self.logprobs = {"content": None, "refusal": None}
        for member in ("content", "refusal"):
            tokens = raw.get(member)
            if isinstance(tokens, list):
                self.logprobs[member] = [*(self.logprobs.get(member) or []), *tokens]

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

    def whole(self, index: int) -> JSONObject:
        message: JSONObject = {
            "role": "assistant",
            "content": "".join(self.text) if self.text or not self.tool_calls else None,
            "refusal": "".join(self.refusal) or None,
            "annotations": [],
        }
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return {
            "index": index,
            "message": message,
            "finish_reason": self.finish_reason or "stop",
            "logprobs": self.logprobs,
        }
