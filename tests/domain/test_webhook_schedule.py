"""The retry schedules, their jitter, Retry-After, and what each HTTP answer means."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import orjson
import pytest

from jobgate.domain import webhooks

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_standard_schedule_spans_about_three_days() -> None:
    schedule = webhooks.SCHEDULES["standard"]
    assert schedule == (0, 5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
    assert webhooks.max_attempts("standard") == 10
    assert 2.9 * 86400 < sum(schedule) < 3.3 * 86400


def test_short_schedule_is_seconds_apart_with_as_many_attempts() -> None:
    schedule = webhooks.SCHEDULES["short"]
    assert len(schedule) == webhooks.max_attempts("standard")
    assert schedule[0] == 0 and max(schedule) <= 5


@pytest.mark.parametrize("profile", ["standard", "short"])
def test_delays_follow_the_schedule_within_twenty_percent(profile: str) -> None:
    rng = random.Random(7)
    schedule = webhooks.SCHEDULES[profile]
    for attempts_done in range(1, len(schedule)):
        nominal = schedule[attempts_done]
        delays = [webhooks.retry_delay_s(attempts_done, profile, rng) for _ in range(200)]
        assert all(d is not None and 0.8 * nominal <= d <= 1.2 * nominal for d in delays)
        if nominal:
            spread = max(d for d in delays if d) - min(d for d in delays if d)
            assert spread > 0.2 * nominal  # jittered, not constant
    assert webhooks.retry_delay_s(len(schedule), profile, rng) is None  # spent
    with pytest.raises(ValueError):
        webhooks.retry_delay_s(0, profile, rng)


def test_retry_after_seconds_date_and_cap() -> None:
    assert webhooks.parse_retry_after("120", now=NOW) == 120
    assert webhooks.parse_retry_after(" 0 ", now=NOW) == 0
    assert webhooks.parse_retry_after("999999", now=NOW) == 3600
    date = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    assert webhooks.parse_retry_after(date, now=NOW) == 90
    past = format_datetime(NOW - timedelta(seconds=90), usegmt=True)
    assert webhooks.parse_retry_after(past, now=NOW) == 0
    assert webhooks.parse_retry_after("soon", now=NOW) is None
    assert webhooks.parse_retry_after("-5", now=NOW) is None
    assert webhooks.parse_retry_after(None, now=NOW) is None


@pytest.mark.parametrize(
    ("status", "headers", "verdict", "retry_after", "gone"),
    [
        (200, {}, "succeeded", None, False),
        (204, {}, "succeeded", None, False),
        (301, {"location": "http://127.0.0.1/"}, "retry", None, False),
        (302, {}, "retry", None, False),
        (307, {}, "retry", None, False),
        (400, {}, "retry", None, False),
        (410, {}, "failed", None, True),
        (429, {"retry-after": "30"}, "retry", 30, False),
        (429, {}, "retry", None, False),
        (503, {"retry-after": "7200"}, "retry", 3600, False),
        (500, {"retry-after": "30"}, "retry", None, False),  # only 429 and 503 are honoured
    ],
)
def test_judge_answer(
    status: int, headers: dict[str, str], verdict: str, retry_after: float | None, gone: bool
) -> None:
    answer = webhooks.judge_answer(status, headers, now=NOW)
    assert (answer.verdict, answer.retry_after_s, answer.gone) == (verdict, retry_after, gone)
    assert (answer.error is None) == (verdict == "succeeded")
    if 300 <= status < 400:
        assert answer.error is not None and "not followed" in answer.error


def test_thin_payload_shape() -> None:
    payload = webhooks.thin_payload(
        event_id="evt_1", event_type="job.succeeded", created_at=5, job_id="job_1", status="x"
    )
    assert payload == {
        "id": "evt_1",
        "object": "event",
        "type": "job.succeeded",
        "created_at": 5,
        "data": {"id": "job_1", "status": "x"},
    }


def test_full_payload_truncates_above_256_kib() -> None:
    thin = webhooks.thin_payload(
        event_id="evt_1", event_type="job.succeeded", created_at=5, job_id="job_1", status="s"
    )
    small = orjson.loads(webhooks.encode_full(thin, {"result": {"text": "hi"}, "usage": None}))
    assert small["data"] == {
        "id": "job_1",
        "status": "s",
        "result": {"text": "hi"},
        "usage": None,
        "result_truncated": False,
    }
    huge = {"text": "x" * (300 * 1024)}
    body = webhooks.encode_full(thin, {"result": huge, "usage": {"input_tokens": 1}})
    assert len(body) <= webhooks.MAX_PAYLOAD_BYTES
    data = orjson.loads(body)["data"]
    assert data["result"] is None and data["result_truncated"] is True
    assert data["usage"] == {"input_tokens": 1}
    everything_huge = webhooks.encode_full(thin, {"result": huge, "metadata": huge})
    assert len(everything_huge) <= webhooks.MAX_PAYLOAD_BYTES
    assert orjson.loads(everything_huge)["data"] == {
        "id": "job_1",
        "status": "s",
        "result_truncated": True,
    }
