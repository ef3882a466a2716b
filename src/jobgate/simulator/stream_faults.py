"""Faults the simulator reports inside a streamed answer, after the 200 and halfway through its
text, each in the exact shape its provider writes it (sources: docs/providers.md):

- OpenAI Chat Completions: a `data:` event holding `{"error": {...}}` (the SDK raises on it);
  a rate limit nests the limit's headers and names the wait in its message;
- OpenAI Responses: the `error` event (ResponseErrorEvent: `code`, `message`, `param`), with a
  null code for a server error;
- Anthropic Messages: `event: error` with `{"type": "error", "error": {"type", "message"}}`, a
  spend limit naming `details.error_code`; a rate limit shows which limit is exhausted, until
  when, in the 200's own headers.

`stream_stall` sends nothing more (the connection stays open) until the client gives up.
"""

from __future__ import annotations

from typing import Any

from jobgate.simulator import rate_limits, wire

JSONObject = dict[str, Any]
STALL = "stream_stall"
# fault -> the fault answered as an HTTP status instead (a request that did not stream).
AS_STATUS = {
    "stream_rate_limit": "rate_limit",
    "stream_server_error": "server_error",
    "stream_overloaded": "overloaded",
    "stream_quota": "quota",
    STALL: "hang",
}


def tpm_message(model_name: str, retry_after_s: float) -> str:
    """OpenAI's wording of a token rate limit, naming the wait."""
    wait = rate_limits.go_duration(retry_after_s)
    return (
        f"Rate limit reached for {model_name} in organization org-jobgate-sim on tokens per min "
        f"(TPM): Limit 30000, Used 30000, Requested 512. Please try again in {wait}. Visit "
        "https://platform.openai.com/account/rate-limits to learn more."
    )


def chat_error(fault: str, model_name: str, retry_after_s: float) -> JSONObject:
    """The Chat Completions event that reports `fault` mid-stream."""
    if fault == "stream_rate_limit":
        wait = rate_limits.go_duration(retry_after_s)
        error: JSONObject = {
            "message": tpm_message(model_name, retry_after_s),
            "type": "tokens",
            "param": None,
            "code": "rate_limit_exceeded",
            "headers": {
                "x-ratelimit-limit-requests": "500",
                "x-ratelimit-limit-tokens": "30000",
                "x-ratelimit-remaining-requests": "499",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-requests": "120ms",
                "x-ratelimit-reset-tokens": wait,
            },
        }
    elif fault == "stream_quota":
        error = {
            "message": "You exceeded your current quota, please check your plan and billing "
            "details.",
            "type": "insufficient_quota",
            "param": None,
            "code": "insufficient_quota",
        }
    elif fault == "stream_overloaded":
        error = {
            "message": "The server is overloaded or not ready yet.",
            "type": "service_unavailable_error",
            "param": None,
            "code": None,
        }
    else:
        error = {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error",
            "param": None,
            "code": None,
        }
    return {"error": error}


def responses_error(fault: str, model_name: str, retry_after_s: float) -> JSONObject:
    """The Responses `error` event (unnumbered) that reports `fault` mid-stream."""
    code: str | None
    if fault == "stream_rate_limit":
        code, message = "rate_limit_exceeded", tpm_message(model_name, retry_after_s)
    elif fault == "stream_quota":
        code = "insufficient_quota"
        message = "You exceeded your current quota, please check your plan and billing details."
    elif fault == "stream_overloaded":
        code, message = "server_error", "The server is overloaded or not ready yet."
    else:
        code, message = None, "An error occurred while processing your request."
    return {"type": "error", "code": code, "message": message, "param": None}


def messages_error(fault: str) -> JSONObject:
    """The Anthropic `error` event that reports `fault` mid-stream."""
    error: JSONObject
    if fault == "stream_rate_limit":
        error = {
            "type": "rate_limit_error",
            "message": "This request would exceed the rate limit for your organization of "
            "8,000 output tokens per minute.",
        }
    elif fault == "stream_quota":
        error = {
            "type": "rate_limit_error",
            "message": "Your organization has reached its monthly API usage limit.",
            "details": {"error_code": "enforced_spend_limit_reached"},
        }
    elif fault == "stream_overloaded":
        error = {"type": "overloaded_error", "message": "Overloaded"}
    else:
        error = {"type": "api_error", "message": "Internal server error"}
    return {"type": "error", "error": error}


def messages_headers(fault: str, retry_after_s: float, now_s: float) -> dict[str, str]:
    """What the 200 of a Messages stream that will hit `fault` says of the account: for a
    rate limit, the exhausted output-token limit and when it resets."""
    if fault != "stream_rate_limit":
        return {}
    return {
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "0",
        "anthropic-ratelimit-output-tokens-reset": wire.rfc3339(now_s + retry_after_s),
    }
