"""The simulated model: deterministic answers in the providers' wire formats, plus faults.

Shared by the in-process `sim` provider and the `jobgate simulator` HTTP server, both steered by
the `sim` directives of a request body (wire.sim). A trailing assistant message is a prefix to
continue (Anthropic prefill, and OpenAI-compatible servers that take one): the answer is the
rest of what the model would have said after it (the whole answer when it does not start with
it).
"""

from __future__ import annotations

import math
import random
from typing import Any

from jobgate import errors
from jobgate.wire import content

JSONObject = dict[str, Any]


def fault(kind: str, retry_after_s: float) -> errors.ProviderError:
    """The classified error a simulated fault raises (a stream fault where the answer does
    not stream: its HTTP twin)."""
    kind = kind.removeprefix("stream_")
    if kind == "rate_limit":
        return errors.ProviderRateLimited("simulated rate limit", retry_after_s=retry_after_s)
    if kind == "quota":
        return errors.ProviderQuotaExceeded(
            "simulated: you exceeded your current quota", code="insufficient_quota", status_code=429
        )
    if kind == "server_error":
        return errors.ProviderRetryable("simulated server error", status_code=500)
    if kind == "overloaded":
        return errors.ProviderRetryable(
            "simulated overload", code="overloaded_error", status_code=529
        )
    if kind == "drop":
        return errors.ProviderOutcomeUnknown("simulated connection dropped after the request")
    return errors.ProviderFatal("simulated invalid request", status_code=400)


def count_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: about four characters a token."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def echo_reply(prompt: str) -> str:
    return f"echo: {prompt}"


def continued(reply: str, messages: Any) -> str:
    """What is left of `reply` after a trailing assistant message (a prefix to continue):
    the rest when the reply starts with it, else the whole reply."""
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return reply
    prefix = content.content_text(last.get("content"))
    return reply[len(prefix) :] if prefix and reply.startswith(prefix) else reply


def chat_completion(body: JSONObject, *, created: int) -> JSONObject:
    """A `chat.completion` object answering the last user message (OpenAI's published shape)."""
    messages = body.get("messages") or []
    prompt: str | None = None  # the last user message's text
    prompt_tokens = 0
    for message in reversed(messages):  # one pass (a zero-latency job's answer is hot)
        if isinstance(message, dict):
            text = content.content_text(message.get("content"))
            prompt_tokens += count_tokens(text)
            if prompt is None and message.get("role") == "user":
                prompt = text
    reply = continued(echo_reply(prompt or ""), messages)
    completion_tokens = count_tokens(reply)
    return {
        # Unique, not secret: a PRNG's bits (a system call per answer costs more than the
        # rest of a zero-latency answer).
        "id": f"chatcmpl-{random.getrandbits(96):024x}",
        "object": "chat.completion",
        "created": created,
        "model": body.get("model", "sim-echo"),
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": reply,
                    "refusal": None,
                    "annotations": [],
                },
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "system_fingerprint": "fp_jobgate_sim",
        "service_tier": "default",
    }
