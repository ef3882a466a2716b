"""Outbound webhooks, the pure part: retry schedules, payloads and what an HTTP answer means for a
delivery. Their Standard Webhooks signatures are wire.standard_webhooks."""

from __future__ import annotations

import dataclasses
import email.utils
import random
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

import orjson

# Delay before attempt n (1-based) is SCHEDULES[profile][n - 1]; after the last, give up.
SCHEDULES: dict[str, tuple[float, ...]] = {
    # immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h: about three days
    "standard": (0, 5, 300, 1_800, 7_200, 18_000, 36_000, 50_400, 72_000, 86_400),
    # the same ten attempts, seconds apart, for development and tests
    "short": (0, 1, 2, 3, 5, 5, 5, 5, 5, 5),
}
JITTER = 0.2  # each delay is drawn from [0.8, 1.2] x its nominal value
RETRY_AFTER_CAP_S = 3_600.0
MAX_PAYLOAD_BYTES = 256 * 1024
PING = "ping"
PROGRESS = "job.progress"  # domain.events.PROGRESS
BATCH_PROGRESS = "batch.progress"  # domain.events.BATCH_PROGRESS
DEFAULT_PROGRESS_INTERVAL_S = 5.0
PROGRESS_INTERVAL_RANGE_S = (1.0, 3600.0)

Verdict = Literal["succeeded", "retry", "failed"]


def retried(event_type: str) -> bool:
    """Whether a failed attempt at this event is tried again on the schedule. A progress is
    not: its next one (after the endpoint's interval, with newer figures) stands in for the
    retry, so a receiver that is down never faces three days of stale progress."""
    return event_type not in (PROGRESS, BATCH_PROGRESS)


def max_attempts(profile: str) -> int:
    return len(SCHEDULES[profile])


def retry_delay_s(
    attempts_done: int, profile: str, rng: random.Random | None = None
) -> float | None:
    """Seconds to wait before the next attempt after `attempts_done` failed ones, with ±20%
    jitter; None when the schedule is spent."""
    schedule = SCHEDULES[profile]
    if attempts_done < 1:
        raise ValueError("attempts_done is 1-based")
    if attempts_done >= len(schedule):
        return None
    nominal = schedule[attempts_done]
    return nominal * (rng or random).uniform(1 - JITTER, 1 + JITTER)


def parse_retry_after(value: str | None, *, now: datetime) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or an HTTP date), capped at an
    hour; None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    seconds: float | None
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if moment.tzinfo is None:
            return None
        seconds = (moment - now).total_seconds()
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_S)


@dataclasses.dataclass(frozen=True, slots=True)
class AnswerVerdict:
    verdict: Verdict
    error: str | None
    retry_after_s: float | None = None  # replaces the schedule's next delay
    gone: bool = False  # 410: the endpoint asked to be disabled


def judge_answer(status_code: int, headers: Mapping[str, str], *, now: datetime) -> AnswerVerdict:
    """What a receiver's HTTP answer means: 2xx succeeds; a redirect is not followed and
    fails the attempt; 410 Gone ends the delivery and disables the endpoint; 429 and 503
    honour Retry-After; anything else is retried on the schedule."""
    if 200 <= status_code < 300:
        return AnswerVerdict("succeeded", None)
    if 300 <= status_code < 400:
        location = headers.get("location", "")
        shown = f" to {location[:200]}" if location else ""
        return AnswerVerdict("retry", f"redirect ({status_code}{shown}) not followed")
    if status_code == 410:
        return AnswerVerdict("failed", "410 Gone: the endpoint was disabled", gone=True)
    retry_after_s = None
    if status_code in (429, 503):
        retry_after_s = parse_retry_after(headers.get("retry-after"), now=now)
    return AnswerVerdict("retry", f"HTTP {status_code}", retry_after_s)


# -- payloads -------------------------------------------------------------------------------


def thin_payload(
    *, event_id: str, event_type: str, created_at: int, job_id: str, status: str
) -> dict[str, Any]:
    return {
        "id": event_id,
        "object": "event",
        "type": event_type,
        "created_at": created_at,
        "data": {"id": job_id, "status": status},
    }


def encode_full(thin: dict[str, Any], job_fields: Mapping[str, Any]) -> bytes:
    """The payload with the job's result, error and usage under `data`. Above 256 KiB the
    result is left out and `data.result_truncated` is true: fetch it with GET /v1/jobs/{id}."""
    data = {**thin["data"], **job_fields, "result_truncated": False}
    body = orjson.dumps({**thin, "data": data})
    if len(body) <= MAX_PAYLOAD_BYTES:
        return body
    data = {**data, "result": None, "result_truncated": True}
    body = orjson.dumps({**thin, "data": data})
    if len(body) <= MAX_PAYLOAD_BYTES:
        return body
    return orjson.dumps({**thin, "data": {**thin["data"], "result_truncated": True}})


def progress_payload(
    *,
    event_id: str,
    created_at: int,
    job_id: str,
    output_tokens: int,
    progress: float | None,
) -> dict[str, Any]:
    """A `job.progress` event: the running job's output tokens so far and, when known, its
    `progress` fraction, as the job read shows them."""
    thin = thin_payload(
        event_id=event_id,
        event_type=PROGRESS,
        created_at=created_at,
        job_id=job_id,
        status="running",
    )
    thin["data"] |= {"output_tokens": output_tokens, "progress": progress}
    return thin


def batch_progress_payload(
    *, event_id: str, created_at: int, batch_id: str, request_counts: Mapping[str, int]
) -> dict[str, Any]:
    """A `batch.progress` event: the in-progress batch's `request_counts` as
    `GET /v1/batches/{id}` shows them."""
    thin = thin_payload(
        event_id=event_id,
        event_type=BATCH_PROGRESS,
        created_at=created_at,
        job_id=batch_id,
        status="in_progress",
    )
    thin["data"] |= {"object": "batch", "request_counts": dict(request_counts)}
    return thin
