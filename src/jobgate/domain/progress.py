"""Honest progress (issue 19): a fraction from 0 to 1 taken only from what a provider reports
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
