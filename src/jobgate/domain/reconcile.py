"""When the reconciler looks at a background job again: pure schedule arithmetic."""

from __future__ import annotations

import random

CANCEL_CHECK_S = 1.0  # a cancel was sent: look again soon, it usually takes effect at once
FAILURE_BASE_S = 1.0


def _jitter(seconds: float, rng: random.Random | None) -> float:
    """±20%, so that jobs created together do not stay in lockstep."""
    return seconds * (0.8 + 0.4 * (rng or random).random())


def next_check_in_s(
    checks: int, *, first_s: float, max_s: float, rng: random.Random | None = None
) -> float:
    """After `checks` status checks that found the job still running: first_s doubled per
    check, capped at max_s, with jitter."""
    return _jitter(min(max_s, first_s * 2 ** min(checks, 30)), rng)


def failure_backoff_s(failures: int, *, max_s: float, rng: random.Random | None = None) -> float:
    """After `failures` consecutive failed checks (status check or completion handling)."""
    return _jitter(min(max_s, FAILURE_BASE_S * 2 ** min(failures, 30)), rng)
