"""Honest progress: a fraction from 0 to 1 taken only from what a provider reports
about its job, never invented from elapsed time. Anthropic Message Batches report request
counts; the simulator (and any provider) may report a `progress` number; others report none
(None)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_DONE_COUNTS = ("succeeded", "errored", "canceled", "expired")


def reported(body: Mapping[str, Any] | None) -> float | None:
    """The fraction done that a provider's object states, or None."""
    if not body:
        return None
    counts = body.get("request_counts")
    if isinstance(counts, Mapping):
        numbers = {k: v for k, v in counts.items() if isinstance(v, int) and v >= 0}
        done = sum(numbers.get(k, 0) for k in _DONE_COUNTS)
        total = done + numbers.get("processing", 0)
        return done / total if total > 0 else None
    value = body.get("progress")
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    return None


OUTPUT_CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
CHARS_PER_TOKEN = 4
STREAMING_CEILING = 0.99  # a running stream is never done: 1 is for the finished job


def output_cap(request: Mapping[str, Any] | None) -> int | None:
    """The output cap a request names (`max_tokens`, `max_completion_tokens` or
    `max_output_tokens`), or None."""
    for key in OUTPUT_CAPS:
        value = (request or {}).get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def streamed(chars: int, cap: int | None) -> tuple[int, float | None]:
    """A streaming job's output so far: its tokens (the streamed characters / 4, the estimate
    the rate limits use: jobgate does not tokenize) and, when the request capped its output,
    the fraction of that cap (below 1 until the job ends; a lower bound, since an answer may
    stop before its cap)."""
    tokens = -(-chars // CHARS_PER_TOKEN)
    if cap is None:
        return tokens, None
    return tokens, min(tokens / cap, STREAMING_CEILING)
