"""The simulator as a rate-limited account: requests and tokens a minute per model, enforced
the way the providers describe theirs, so that a test can see jobgate keep under a limit the
provider would otherwise answer with 429.

Each limit is a token bucket refilled continuously (Anthropic: "capacity is continuously
replenished up to your maximum limit, rather than being reset at fixed intervals"). Its
capacity is `window_s` seconds of refill: 60 s (the whole minute, the default) lets a burst of
a minute's worth through at once; a short window copies OpenAI's note that limits "can be
quantized", e.g. 60,000 requests a minute enforced as 1,000 a second.

Tokens are charged when the request arrives, as estimated from the prompt (characters / 4)
plus its output cap (`max_tokens`, `max_completion_tokens` or `max_output_tokens`: both
providers estimate usage from it), and settled to the usage the answer reports once it is
known (Anthropic documents this for output tokens: "estimated based on max_tokens at the
beginning and adjusted at the end"). A failed call keeps its estimate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from jobgate.domain import rate_limits as jobgate_limits

CHARS_PER_TOKEN = 4
_OUTPUT_CAPS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_PROMPT_FIELDS = ("messages", "input", "system", "prompt")


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """What the simulated account allows per model; 0 = no limit."""

    rpm: int = 0
    tpm: int = 0
    window_s: float = 60.0  # a bucket's capacity, in seconds of refill

    @property
    def enforced(self) -> bool:
        return self.rpm > 0 or self.tpm > 0


@dataclasses.dataclass(slots=True)
class Bucket:
    """One continuously refilled bucket: `per_minute` units a minute, at most `capacity`."""

    per_minute: int
    capacity: float
    level: float
    updated: float

    @classmethod
    def full(cls, per_minute: int, window_s: float, now: float) -> Bucket:
        capacity = max(per_minute * window_s / 60.0, 1.0)
        return cls(per_minute, capacity, capacity, now)

    def refill(self, now: float) -> None:
        elapsed = max(now - self.updated, 0.0)
        self.level = min(self.capacity, self.level + elapsed * self.per_minute / 60.0)
        self.updated = max(now, self.updated)

    def wait_s(self, amount: float) -> float:
        """Seconds until `amount` is in the bucket (after a refill); a request larger than
        the whole capacity waits until the bucket is full, and is refused then too."""
        missing = min(amount, self.capacity) - self.level
        return max(missing, 0.0) * 60.0 / self.per_minute

    def reset_s(self) -> float:
        """Seconds until the bucket is full again (what the reset headers report)."""
        return (self.capacity - self.level) * 60.0 / self.per_minute


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """A request over a limit: which one, and how long until it would be admitted."""

    limit: str  # "requests" | "tokens"
    retry_after_s: float
    requested: int


@dataclasses.dataclass(frozen=True, slots=True)
class Charge:
    """What an admitted request took, to settle against its usage later."""

    model: str
    tokens: int


class Enforcer:
    """The account's buckets, per model, on the simulator's clock."""

    def __init__(self, limits: Limits, now: Callable[[], float]) -> None:
        self.limits = limits
        self._now = now
        self._requests: dict[str, Bucket] = {}
        self._tokens: dict[str, Bucket] = {}
        self.refused = 0  # 429s answered for a limit
        self.admitted = 0

    def admit(self, model: str, body: Mapping[str, Any]) -> Charge | Refusal:
        """Take one request and the estimated tokens, or say why not (taking nothing)."""
        now = self._now()
        tokens = estimate_tokens(body)
        requests, token_bucket = self._buckets(model, now)
        if requests is not None and requests.level < 1:
            self.refused += 1
            return Refusal("requests", requests.wait_s(1), 1)
        if token_bucket is not None and token_bucket.level < min(tokens, token_bucket.capacity):
            self.refused += 1
            return Refusal("tokens", token_bucket.wait_s(tokens), tokens)
        if token_bucket is not None and tokens > token_bucket.capacity:
            self.refused += 1  # can never fit: refused when the bucket is full too
            return Refusal("tokens", 60.0, tokens)
        if requests is not None:
            requests.level -= 1
        if token_bucket is not None:
            token_bucket.level -= tokens
        self.admitted += 1
        return Charge(model, tokens)

    def settle(self, charge: Charge, usage: Mapping[str, Any] | None) -> None:
        """Correct an admitted request's estimate by the usage its answer reported."""
        used = jobgate_limits.used_tokens(usage)
        bucket = self._tokens.get(charge.model)
        if used is None or bucket is None:
            return
        bucket.refill(self._now())
        bucket.level = min(bucket.capacity, bucket.level + charge.tokens - used)

    def state(self, model: str) -> tuple[Bucket | None, Bucket | None]:
        """The model's request and token buckets, refilled to now (None: not limited)."""
        return self._buckets(model, self._now())

    def _buckets(self, model: str, now: float) -> tuple[Bucket | None, Bucket | None]:
        found: list[Bucket | None] = []
        for limit, table in ((self.limits.rpm, self._requests), (self.limits.tpm, self._tokens)):
            if limit <= 0:
                found.append(None)
                continue
            bucket = table.get(model)
            if bucket is None:
                bucket = table[model] = Bucket.full(limit, self.limits.window_s, now)
            bucket.refill(now)
            found.append(bucket)
        return found[0], found[1]


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """What a request is charged on arrival: its prompt's characters / 4 (the text of
    `messages`, `input`, `system`, `prompt`) plus its output cap (0 when it names none)."""
    chars = sum(len(_text(body.get(field))) for field in _PROMPT_FIELDS)
    cap = next(
        (
            int(body[k])
            for k in _OUTPUT_CAPS
            if isinstance(body.get(k), int) and not isinstance(body.get(k), bool)
        ),
        0,
    )
    return math.ceil(chars / CHARS_PER_TOKEN) + max(cap, 0)


def _text(value: Any) -> str:
    """The text in a prompt field: strings, the `content`/`text` of messages and parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_text(item) for item in value)
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return str(value["text"])
        return _text(value.get("content"))
    return orjson.dumps(value).decode()
