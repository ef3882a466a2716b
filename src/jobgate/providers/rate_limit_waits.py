"""How long a provider asks to be left alone after a rate limit: its `retry-after` headers, the
reset headers of its limits (OpenAI `x-ratelimit-reset-*` durations such as `6m0s`, Anthropic
`anthropic-ratelimit-*-reset` RFC 3339 times), or the wait its message names ("Please try again
in 6.57s", OpenAI's wording inside a stream, where no header can be sent)."""

from __future__ import annotations

import email.utils
import re
from datetime import datetime

import httpx


def retry_after_s(headers: httpx.Headers, *, now: datetime, default_s: float) -> float:
    """How long the provider asked us to wait: retry-after-ms, then retry-after, then the
    rate-limit reset headers (the latest reset among the limits that are exhausted, or among
    all of them when none says so), then `default_s`."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return _bounded(float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return _bounded(float(raw))
        except ValueError:
            try:
                moment = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError, IndexError):
                moment = None
            if moment is not None and moment.tzinfo is not None:
                return _bounded((moment - now).total_seconds())
    reset = reset_after_s(headers, now=now)
    return default_s if reset is None else reset


MAX_RETRY_AFTER_S = 86_400.0  # a header asking for longer is believed for a day
_RESET_HEADERS = (
    # (reset header, remaining header, format)
    ("x-ratelimit-reset-requests", "x-ratelimit-remaining-requests", "duration"),
    ("x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens", "duration"),
    ("anthropic-ratelimit-requests-reset", "anthropic-ratelimit-requests-remaining", "time"),
    ("anthropic-ratelimit-tokens-reset", "anthropic-ratelimit-tokens-remaining", "time"),
    (
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-input-tokens-remaining",
        "time",
    ),
    (
        "anthropic-ratelimit-output-tokens-reset",
        "anthropic-ratelimit-output-tokens-remaining",
        "time",
    ),
)
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")
_DURATION_UNIT_S = {
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
}


def _bounded(seconds: float) -> float:
    if seconds != seconds:  # NaN
        return 0.0
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


def parse_duration_s(raw: str) -> float | None:
    """A Go-style duration as OpenAI sends it (`6m0s`, `1s`, `20ms`, `1h2m3.5s`), in seconds;
    None for anything else."""
    text = raw.strip()
    if not text or len(text) > 64:
        return None
    total = 0.0
    position = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _DURATION_UNIT_S[match.group(2)]
        position = match.end()
    if position != len(text):
        return None
    return total


def _parse_time_s(raw: str, *, now: datetime) -> float | None:
    """Seconds from `now` to an RFC 3339 time (Anthropic's reset headers); None if unreadable."""
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return (moment - now).total_seconds()


def reset_after_s(
    headers: httpx.Headers, *, now: datetime, exhausted_only: bool = False
) -> float | None:
    """When the exhausted rate limit resets, from the providers' reset headers (among all the
    limits when none says it is exhausted, unless `exhausted_only`); None when the answer
    carries none that parse."""
    exhausted: list[float] = []
    every: list[float] = []
    for reset_name, remaining_name, kind in _RESET_HEADERS:
        raw = headers.get(reset_name)
        if not raw:
            continue
        seconds = parse_duration_s(raw) if kind == "duration" else _parse_time_s(raw, now=now)
        if seconds is None:
            continue
        every.append(seconds)
        if headers.get(remaining_name, "").strip() == "0":
            exhausted.append(seconds)
    chosen = exhausted if exhausted or exhausted_only else every
    return _bounded(max(chosen)) if chosen else None


_TRY_AGAIN = re.compile(r"try again in ((?:\d+(?:\.\d*)?(?:ms|us|µs|ns|h|m|s))+)", re.IGNORECASE)


def message_wait_s(message: str) -> float | None:
    """The wait an error message names ("Please try again in 6.57s", "in 1m30s", "in 20ms");
    None when it names none."""
    found = _TRY_AGAIN.search(message)
    seconds = None if found is None else parse_duration_s(found.group(1))
    return None if seconds is None else _bounded(seconds)
