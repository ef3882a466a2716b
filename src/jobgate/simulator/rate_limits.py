"""What the simulator's 429s carry: the lenient `retry-after-ms`, or, in the realistic profile,
the providers' own rate-limit headers (OpenAI `x-ratelimit-*` durations, Anthropic
`retry-after` and `anthropic-ratelimit-*` RFC 3339 times); and, when the simulator enforces
rpm/tpm (`simulator.enforcement`), the headers every answer of a limited account carries."""

from __future__ import annotations

import math

from jobgate.simulator import wire
from jobgate.simulator.enforcement import Bucket, Limits, Refusal
from jobgate.simulator.profiles import SimProfile


def headers(
    retry_after_s: float, anthropic: bool, profile: SimProfile | None, now_s: float
) -> dict[str, str]:
    """What a 429 carries. Realistic: OpenAI's reset durations without a retry-after (the
    harder of its answers); Anthropic's retry-after (whole seconds) and the reset time of the
    exhausted limit."""
    if profile is None or not profile.rate_limit_headers:
        return {
            "retry-after-ms": str(int(retry_after_s * 1000)),
            "retry-after": str(max(1, round(retry_after_s))),
        }
    if anthropic:
        reset_at = wire.rfc3339(now_s + retry_after_s)
        return {
            "retry-after": str(max(1, math.ceil(retry_after_s))),
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset_at,
        }
    return {
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": go_duration(retry_after_s),
        "x-ratelimit-remaining-tokens": "1000",
        "x-ratelimit-reset-tokens": "20ms",
    }


def go_duration(seconds: float) -> str:
    """A duration as OpenAI writes it: `6m0s`, `1s`, `250ms`."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:g}s"
    return f"{int(minutes)}m{text}" if minutes else text


def account_headers(
    requests: Bucket | None, tokens: Bucket | None, anthropic: bool, now_s: float
) -> dict[str, str]:
    """The rate-limit headers every answer of a limited account carries: OpenAI's
    `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (reset as a duration until the
    bucket is full), Anthropic's `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`
    (reset as an RFC 3339 time)."""
    found: dict[str, str] = {}
    for name, bucket in (("requests", requests), ("tokens", tokens)):
        if bucket is None:
            continue
        remaining = str(max(int(bucket.level), 0))
        if anthropic:
            found[f"anthropic-ratelimit-{name}-limit"] = str(bucket.per_minute)
            found[f"anthropic-ratelimit-{name}-remaining"] = remaining
            found[f"anthropic-ratelimit-{name}-reset"] = wire.rfc3339(now_s + bucket.reset_s())
        else:
            found[f"x-ratelimit-limit-{name}"] = str(bucket.per_minute)
            found[f"x-ratelimit-remaining-{name}"] = remaining
            found[f"x-ratelimit-reset-{name}"] = go_duration(bucket.reset_s())
    return found


def refusal_headers(
    refusal: Refusal,
    requests: Bucket | None,
    tokens: Bucket | None,
    anthropic: bool,
    now_s: float,
) -> dict[str, str]:
    """A 429 for a limit: the account's headers plus `retry-after` (whole seconds, rounded
    up, as both providers send it), and the exhausted limit's reset set to that wait."""
    found = account_headers(requests, tokens, anthropic, now_s)
    found["retry-after"] = str(max(1, math.ceil(refusal.retry_after_s)))
    if anthropic:
        found[f"anthropic-ratelimit-{refusal.limit}-reset"] = wire.rfc3339(
            now_s + refusal.retry_after_s
        )
    else:
        found[f"x-ratelimit-reset-{refusal.limit}"] = go_duration(refusal.retry_after_s)
    return found


def refusal_message(refusal: Refusal, model: str, limits: Limits, anthropic: bool) -> str:
    """The error message, worded after each provider's."""
    per_minute = limits.rpm if refusal.limit == "requests" else limits.tpm
    if anthropic:
        unit = "requests" if refusal.limit == "requests" else "tokens"
        return (
            f"This request would exceed the rate limit for your organization of "
            f"{per_minute} {unit} per minute ({model})."
        )
    short = "RPM" if refusal.limit == "requests" else "TPM"
    return (
        f"Rate limit reached for {model} on {refusal.limit} per min ({short}): "
        f"Limit {per_minute}, Requested {refusal.requested}. "
        f"Please try again in {go_duration(refusal.retry_after_s)}."
    )
