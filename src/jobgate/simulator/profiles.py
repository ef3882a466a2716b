"""How faithfully the simulated provider copies the real APIs where they are less kind than a
test would like. `realistic` (the default everywhere, tests included) does what OpenAI and
Anthropic do; `lenient` keeps the older, kinder behaviour for a test that wants to isolate one
thing. docs/providers.md lists each behaviour with the provider's own source.
"""

from __future__ import annotations

import dataclasses

REALISTIC = "realistic"
LENIENT = "lenient"
BATCH_EXPIRY_S = 86_400.0  # Anthropic: a batch's unfinished requests expire after 24 hours


@dataclasses.dataclass(frozen=True, slots=True)
class SimProfile:
    name: str
    # Replay a create's answer for a repeated Idempotency-Key. Neither provider documents
    # doing so, so the realistic simulator runs every create it receives.
    idempotent: bool
    # Cancelling a background response that already finished: OpenAI answers 400 ("Cannot
    # cancel a completed response"); the lenient simulator answers 200 with the object. An
    # Anthropic batch that has ended is refused the same way.
    cancel_finished_refused: bool
    # Anthropic's `request_counts` stay all `processing` until the whole batch ends.
    batch_counts_at_end: bool
    # A 429 carries the providers' rate-limit headers instead of the lenient `retry-after-ms`:
    # Anthropic `retry-after` (whole seconds) plus `anthropic-ratelimit-*-reset` times;
    # OpenAI its `x-ratelimit-reset-*` durations only (its 429s do not always name a
    # retry-after: the simulator takes that harder case).
    rate_limit_headers: bool
    # Every answer carries a request id (`x-request-id`; Anthropic's `request-id`).
    request_ids: bool
    # A parameter the API does not know is refused (400) as the provider refuses it
    # (simulator.parameters); the lenient simulator ignores it.
    strict_parameters: bool


PROFILES = {
    REALISTIC: SimProfile(
        REALISTIC,
        idempotent=False,
        cancel_finished_refused=True,
        batch_counts_at_end=True,
        rate_limit_headers=True,
        request_ids=True,
        strict_parameters=True,
    ),
    LENIENT: SimProfile(
        LENIENT,
        idempotent=True,
        cancel_finished_refused=False,
        batch_counts_at_end=False,
        rate_limit_headers=False,
        request_ids=False,
        strict_parameters=False,
    ),
}


def profile(name: str = REALISTIC, *, idempotent: bool | None = None) -> SimProfile:
    """The named profile, optionally with deduplicating creates switched on or off."""
    chosen = PROFILES[name]
    if idempotent is not None:
        chosen = dataclasses.replace(chosen, idempotent=idempotent)
    return chosen
