"""The parameters each simulated API knows, and how it refuses any other, as the providers do:
OpenAI's Chat Completions answer 400 "Unrecognized request argument supplied: X", its
Responses API 400 `unknown_parameter` ("Unknown parameter: 'X'.", `param` naming it), and
Anthropic 400 `invalid_request_error` "X: Extra inputs are not permitted". A simulator that
took anything would let a request through that the real API refuses.

The sets are the official SDKs' create parameters (a test compares them), plus `stream`; the
simulator's own `sim` member is taken out of a body before it is checked. Only top-level
members are checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

CHAT_COMPLETIONS = frozenset({
    "audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
    "max_completion_tokens", "max_tokens", "messages", "metadata", "modalities", "model",
    "moderation", "n", "parallel_tool_calls", "prediction", "presence_penalty",
    "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning_effort",
    "response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
    "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
    "verbosity", "web_search_options",
})  # fmt: skip
RESPONSES = frozenset({
    "access_programs", "background", "background_options", "context_management",
    "conversation", "image", "include", "input", "instructions", "max_output_tokens",
    "max_tool_calls", "metadata", "model", "moderation", "parallel_tool_calls",
    "previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_options",
    "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store",
    "stream", "stream_options", "temperature", "text", "tool_choice", "tools", "top_logprobs",
    "top_p", "truncation", "user",
})  # fmt: skip
MESSAGES = frozenset({
    "cache_control", "container", "diagnostics", "inference_geo", "max_tokens", "messages",
    "metadata", "model", "output_config", "service_tier", "speed", "stop_sequences", "stream",
    "system", "thinking", "tool_choice", "tools", "user_profile_id", "workspace_id",
})  # fmt: skip
KNOWN = {
    "/v1/chat/completions": CHAT_COMPLETIONS,
    "/v1/responses": RESPONSES,
    "/v1/messages": MESSAGES,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Unknown:
    """A member the API does not know, as that API words its refusal."""

    name: str
    message: str
    code: str | None  # OpenAI's `error.code` (None where it sends null)
    param: str | None  # OpenAI's `error.param`


def unknown(endpoint: str, body: Mapping[str, Any], *, where: str = "") -> Unknown | None:
    """The first member of `body` (in sorted order) that `endpoint` does not take, or None.
    `where` prefixes the name (a batch request's `requests.0.params.`)."""
    known = KNOWN.get(endpoint)
    if known is None:
        return None
    extra = sorted(key for key in body if key not in known and key != "sim")
    if not extra:
        return None
    name = where + extra[0]
    if endpoint == "/v1/chat/completions":
        return Unknown(name, f"Unrecognized request argument supplied: {name}", None, None)
    if endpoint == "/v1/responses":
        return Unknown(name, f"Unknown parameter: '{name}'.", "unknown_parameter", name)
    return Unknown(name, f"{name}: Extra inputs are not permitted", None, None)
