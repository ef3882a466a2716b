"""wait(): long poll when the server holds requests, full-jitter backoff when it does not,
Retry-After on 429/503, a total timeout. On a fake clock: no real sleeping."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import httpx
import pytest

from jobgate.client import APIConnectionError, Job, NotFoundError, WaitTimeout
from jobgate.client.backoff import Backoff
from tests.client.fakes import FakeClock, FakeTimeAsyncClient, FakeTimeClient, job_json, problem


def scripted(
    clock: FakeClock, answers: Sequence[httpx.Response | Exception], *, hold: bool = False
) -> tuple[list[httpx.Request], Callable[[httpx.Request], httpx.Response]]:
    """A handler answering from `answers`; with `hold`, an unchanged answer first "holds" the
    request for its whole ?wait= window, as a long-polling server does."""
    seen: list[httpx.Request] = []
    pending = iter(answers)
    last_status: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = next(pending)
        if isinstance(answer, Exception):
            raise answer
        status = answer.json().get("status") if answer.status_code == 200 else None
        if hold and status is not None and last_status and last_status[-1] == status:
            clock.now += float(request.url.params.get("wait", "0"))
        if status is not None:
            last_status.append(status)
        return answer

    return seen, handler


def ok(status: str) -> httpx.Response:
    return httpx.Response(200, json=job_json(status=status))


def expected_delays(count: int, seed: int = 7) -> list[float]:
    reference = Backoff(random.Random(seed))
    return [reference.next_delay_s() for _ in range(count)]


def positive(sleeps: list[float]) -> list[float]:
    return [s for s in sleeps if s > 0]


def test_falls_back_to_full_jitter_backoff_when_long_poll_is_not_honoured() -> None:
    clock = FakeClock()
    # A server (or proxy) that answers ?wait= at once: nine unchanged answers, then done.
    answers = [ok("running")] * 10 + [ok("succeeded")]
    seen, handler = scripted(clock, answers)
    with FakeTimeClient(handler, clock) as client:
        job = client.wait("job_1")
    assert job.status == "succeeded"
    assert "wait" not in seen[0].url.params  # a plain read first: the status at once
    assert all(r.url.params["wait"] == "30" for r in seen[1:])  # still offers long polling
    delays = positive(clock.sleeps)
    assert delays == expected_delays(9)  # exactly the seeded full-jitter schedule
    for attempt, delay in enumerate(delays, start=1):
        assert 0 <= delay <= min(30.0, 2.0 ** (attempt - 1))


async def test_the_async_client_backs_off_the_same_way() -> None:
    clock = FakeClock()
    _, handler = scripted(clock, [ok("running")] * 10 + [ok("succeeded")])
    async with FakeTimeAsyncClient(handler, clock) as client:
        job = await client.wait("job_1")
    assert job.status == "succeeded"
    assert positive(clock.sleeps) == expected_delays(9)


def test_honours_retry_after_on_429_and_503() -> None:
    clock = FakeClock()
    answers = [
        ok("running"),
        problem(429, "queue_full", retry_after=7),
        problem(503, "storage_unavailable", retry_after=3),
        ok("running"),
        ok("succeeded"),
    ]
    _, handler = scripted(clock, answers)
    with FakeTimeClient(handler, clock) as client:
        assert client.wait("job_1").status == "succeeded"
    jitter = expected_delays(3)
    delays = positive(clock.sleeps)
    assert delays[0] == max(jitter[0], 7.0) and delays[0] >= 7.0
    assert delays[1] == max(jitter[1], 3.0) and delays[1] >= 3.0
    assert delays[2] == jitter[2]  # the unchanged early answer: plain backoff again


def test_long_poll_needs_no_sleeping_and_returns_on_the_transition() -> None:
    clock = FakeClock()
    changes: list[str] = []
    answers = [ok("queued"), ok("running"), ok("running"), ok("running"), ok("succeeded")]
    seen, handler = scripted(clock, answers, hold=True)
    with FakeTimeClient(handler, clock) as client:
        job = client.wait("job_1", on_change=lambda j: changes.append(j.status))
    assert job.status == "succeeded"
    assert positive(clock.sleeps) == []
    assert len(seen) == 5 and all(r.url.params["wait"] == "30" for r in seen[1:])
    assert changes == ["queued", "running", "succeeded"]


def test_total_timeout_bounds_every_long_poll_and_raises_with_the_last_job() -> None:
    clock = FakeClock()
    _, handler = scripted(clock, [ok("running")] * 10, hold=True)
    with FakeTimeClient(handler, clock) as client, pytest.raises(WaitTimeout) as caught:
        client.wait("job_1", timeout_s=75)
    assert isinstance(caught.value.job, Job) and caught.value.job.status == "running"
    assert clock.now - 1000.0 <= 75.0


def test_windows_shrink_to_the_time_left() -> None:
    clock = FakeClock()
    seen, handler = scripted(clock, [ok("running")] * 10, hold=True)
    with FakeTimeClient(handler, clock) as client, pytest.raises(WaitTimeout):
        client.wait("job_1", timeout_s=75)
    # A plain read first, then 30 + 30 + 15 s holds.
    assert [r.url.params.get("wait") for r in seen] == [None, "30", "30", "15"]


def test_a_retry_after_beyond_the_deadline_gives_up_at_once() -> None:
    clock = FakeClock()
    _, handler = scripted(clock, [ok("running"), problem(429, "queue_full", retry_after=120)])
    with FakeTimeClient(handler, clock) as client, pytest.raises(WaitTimeout):
        client.wait("job_1", timeout_s=10)
    assert sum(clock.sleeps) < 10  # never slept into (or past) the deadline


def test_fails_fast_when_the_server_was_never_reached() -> None:
    clock = FakeClock()
    _, handler = scripted(clock, [httpx.ConnectError("refused")] * 5)
    with FakeTimeClient(handler, clock, max_retries=2) as client:
        with pytest.raises(APIConnectionError) as caught:
            client.wait("job_1")
    assert caught.value.outcome_unknown is False
    assert len(positive(clock.sleeps)) == 2


def test_rides_out_cut_long_polls_and_shortens_them() -> None:
    clock = FakeClock()
    answers: list[httpx.Response | Exception] = [
        ok("running"),
        httpx.ReadTimeout("cut by a proxy"),
        httpx.RemoteProtocolError("cut again"),
        httpx.ReadTimeout("and again"),
        ok("succeeded"),
    ]
    seen, handler = scripted(clock, answers)
    with FakeTimeClient(handler, clock, max_retries=0) as client:
        assert client.wait("job_1").status == "succeeded"
    assert [r.url.params.get("wait") for r in seen] == [None, "30", "15", "7.5", "3.7"]


def test_a_missing_job_is_raised_not_retried() -> None:
    clock = FakeClock()
    seen, handler = scripted(clock, [problem(404, "not_found")])
    with FakeTimeClient(handler, clock) as client, pytest.raises(NotFoundError):
        client.wait("job_1")
    assert len(seen) == 1


def test_long_poll_can_be_turned_off() -> None:
    clock = FakeClock()
    seen, handler = scripted(clock, [ok("running")] * 4 + [ok("succeeded")])
    with FakeTimeClient(handler, clock, long_poll_s=0) as client:
        client.wait("job_1")
    assert all("wait" not in r.url.params for r in seen)
    assert positive(clock.sleeps) == expected_delays(3)
