"""The client's retry schedule: exponential backoff with full jitter, never sooner than the
server's Retry-After.

The server has its own copy of the formula (`jobgate.domain.backoff`); the client keeps one
because it must not import server code.
"""

from __future__ import annotations

import random

BASE_S = 1.0
CAP_S = 30.0


def full_jitter_s(attempt: int, rng: random.Random, *, base_s: float, cap_s: float) -> float:
    """A uniform delay in [0, min(cap, base * 2**(attempt-1))] for the 1-based `attempt`."""
    if attempt < 1:
        raise ValueError("attempt is 1-based")
    return rng.uniform(0.0, min(cap_s, base_s * 2 ** min(attempt - 1, 62)))


class Backoff:
    """Successive delays for one operation (a wait, or one request's retries).

    Full jitter spreads clients that failed together so they do not return as a herd. A
    Retry-After from the server is a floor, not a suggestion: the delay is never shorter.
    """

    def __init__(
        self, rng: random.Random | None = None, *, base_s: float = BASE_S, cap_s: float = CAP_S
    ) -> None:
        self.rng = rng or random.Random()
        self.base_s = base_s
        self.cap_s = cap_s
        self.attempt = 0

    def next_delay_s(self, retry_after_s: float | None = None) -> float:
        self.attempt += 1
        delay = full_jitter_s(self.attempt, self.rng, base_s=self.base_s, cap_s=self.cap_s)
        if retry_after_s is not None:
            delay = max(delay, retry_after_s)
        return delay

    def reset(self) -> None:
        self.attempt = 0
