"""What the simulator's 429s carry: the lenient `retry-after-ms`, or, in the realistic profile,
the providers' own rate-limit headers (OpenAI `x-ratelimit-*` durations, Anthropic
`retry-after` and `anthropic-ratelimit-*` RFC 3339 times)."""

from __future__ import annotations

import math

from jobgate.simulator import wire
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
