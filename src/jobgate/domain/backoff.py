"""Retry delays: exponential backoff with full jitter (pure; the caller supplies randomness)."""

from __future__ import annotations

import random


def full_jitter_s(
    attempt: int, *, base_s: float, cap_s: float, rng: random.Random | None = None
) -> float:
    """A uniform delay in [0, min(cap, base * 2**(attempt-1))] for the `attempt`-th retry (1-based).

    Full jitter spreads retries of jobs that failed together, so they do not come back as a herd.
    """
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    ceiling = min(cap_s, base_s * 2 ** min(attempt - 1, 62))
    return (rng or random).uniform(0.0, ceiling)


def jittered_wait_s(wait_s: float, *, rng: random.Random | None = None) -> float:
    """`wait_s` and up to a fifth more: jobs a provider rate-limited together, told to come
    back at the same moment, come back spread out (never sooner than asked)."""
    return wait_s + (rng or random).uniform(0.0, wait_s / 5)
