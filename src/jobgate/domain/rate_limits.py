"""Shared rate limits: requests and tokens per minute for a provider or one of its
models, as GCRA schedules without a burst. Each bucket keeps the time at which its next request
may start (`requests_at`) and at which its token debt is paid (`tokens_at`), in Unix seconds by
the database's clock; storage locks the bucket rows, these rules say what a claim may do.

A request is admitted once both times have come, then pushes `requests_at` one spacing
(60 / rpm) ahead: in any window of T seconds at most T * rpm / 60 + 1 calls start (a request
given back returns its slot only while no later one was admitted: `give_back`). Tokens are
estimated before the call (prompt characters / 4 + the output cap) and added as debt
(60 / tpm seconds each); the reported usage corrects the debt afterwards, and a call that ends
without usage (refused, cancelled, timed out) gives its estimate back. One job never owes a
bucket more than its capacity (`charge`: one minute of tokens), so no single job, however large
its cap, can close a shared bucket for longer. A limit of 0 is none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from jobgate.domain.limits import OUTPUT_CAPS
from jobgate.wire import response_items

PROVIDER_WIDE = ""  # the model of a provider-wide bucket
# The provider of a concurrency key's bucket is this prefix and its tenant's id (its model is
# the key): no provider name holds a colon (config), so the two never meet.
KEY_BUCKET_PREFIX = "key:"
CHARS_PER_TOKEN = 4
# The output allowance of a request that names no cap: enough that a tpm limit means something.
DEFAULT_OUTPUT_TOKENS = 256


@dataclasses.dataclass(frozen=True, slots=True)
class Bucket:
    provider: str
    model: str  # PROVIDER_WIDE, the model its own limits apply to, or a concurrency key
    rpm: int = 0
    tpm: int = 0


def key_bucket(tenant_id: str, key: str, rpm: int) -> Bucket:
    """The shared bucket of one concurrency key of a tenant (`rpm_per_key`): the same rules as
    a provider's, taken by the claim that starts one of the key's jobs."""
    return Bucket(KEY_BUCKET_PREFIX + tenant_id, key, rpm)


@dataclasses.dataclass(frozen=True, slots=True)
class BucketState:
    requests_at: float = 0.0
    tokens_at: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Take:
    """A take's answer: admitted (`wait_s` 0.0) at `at`, the database's time in Unix seconds
    (what a give-back names the request by), or else the seconds until one may be."""

    wait_s: float
    at: float | None = None

    @property
    def admitted(self) -> bool:
        return self.at is not None


def admit(buckets: Sequence[tuple[Bucket, BucketState]], now: float) -> float:
    """0.0 when one more request may start now under every bucket, else how many seconds
    until it may (the longest wait among them)."""
    wait_s = 0.0
    for bucket, state in buckets:
        if bucket.rpm > 0:
            wait_s = max(wait_s, state.requests_at - now)
        if bucket.tpm > 0:
            wait_s = max(wait_s, state.tokens_at - now)
    return max(wait_s, 0.0)


def take(bucket: Bucket, state: BucketState, now: float) -> BucketState:
    """The state once a request was admitted."""
    if bucket.rpm <= 0:
        return state
    return dataclasses.replace(state, requests_at=max(state.requests_at, now) + 60.0 / bucket.rpm)


def give_back(bucket: Bucket, state: BucketState, taken_at: float) -> BucketState:
    """The state once a request admitted at `taken_at` was not used (no job was there to
    claim). Only while its slot is still the last one taken can it be returned: a request
    admitted after it waited for that slot to pass, so returning it then would let a further
    start fall within one spacing of that one."""
    if bucket.rpm <= 0:
        return state
    # An admitted take found requests_at <= taken_at, so it left exactly this value (the same
    # float operation, on the same operands).
    if state.requests_at != taken_at + 60.0 / bucket.rpm:
        return state
    return dataclasses.replace(state, requests_at=taken_at)


def charge(bucket: Bucket, tokens: int) -> int:
    """What one job's `tokens` (estimated or used) cost `bucket`: at most its capacity, one
    minute of tokens, so that no single job closes the bucket for longer than a minute."""
    return min(tokens, bucket.tpm) if bucket.tpm > 0 else 0


def spend(bucket: Bucket, state: BucketState, tokens: int, now: float) -> BucketState:
    """The state once `tokens` were used (or estimated; negative: an estimate corrected down
    or given back). A job's tokens are `charge`d before they are spent."""
    if bucket.tpm <= 0 or tokens == 0:
        return state
    start = max(state.tokens_at, now) if tokens > 0 else state.tokens_at
    return dataclasses.replace(state, tokens_at=start + tokens * 60.0 / bucket.tpm)


# The members of a request body that reach the model as its prompt.
PROMPT_MEMBERS = ("messages", "input", "system", "prompt", "tools", response_items.CONTEXT)


def estimate_tokens(body: Mapping[str, Any] | None) -> int:
    """Tokens a request may use before it is sent: its prompt's characters / 4 (the JSON of
    `messages`, `input`, `system`, `prompt`, `tools`, and the earlier turns a response
    continues), plus its output cap."""
    if not body:
        return DEFAULT_OUTPUT_TOKENS
    prompt = {k: body[k] for k in PROMPT_MEMBERS if k in body}
    try:
        chars = len(orjson.dumps(prompt)) if prompt else 0
    except TypeError:  # not JSON orjson writes (stored bodies are checked; a caller's may not be)
        chars = len(str(prompt))
    cap = next(
        (body[k] for k in OUTPUT_CAPS if isinstance(body.get(k), int) and body[k] > 0),
        DEFAULT_OUTPUT_TOKENS,
    )
    return chars // CHARS_PER_TOKEN + int(cap)


def used_tokens(usage: Mapping[str, Any] | None) -> int | None:
    """Tokens a finished call reported (None when it reported none)."""
    if not usage:
        return None
    pairs = (("input_tokens", "output_tokens"), ("prompt_tokens", "completion_tokens"))
    for first, second in pairs:
        if first in usage or second in usage:
            return int(usage.get(first) or 0) + int(usage.get(second) or 0)
    total = usage.get("total_tokens")
    return int(total) if isinstance(total, int) else None
