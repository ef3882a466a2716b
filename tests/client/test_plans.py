"""The client's operations are plans (`_plans.py`): generators of I/O steps with every
decision inside and no I/O. Driven by hand here, with no transport and no clock, they show
what `Client` and `AsyncClient` both do; the twins only perform the steps."""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest

from jobgate.client import AsyncClient, Client, WaitTimeout, _steps
from jobgate.client.models import JobEvent
from tests.client.fakes import KEY, URL, job_json, problem


def client() -> Client:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError("a plan driven by hand sends nothing itself")

    return Client(URL, KEY, rng=random.Random(7), transport=httpx.MockTransport(refuse))


def ok(body: Any) -> httpx.Response:
    return httpx.Response(200, json=body)


def sse(*events: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for event in events:
        lines += [f"id: {event['seq']}", "event: job.event", f"data: {json.dumps(event)}", ""]
    return lines


def event(seq: int, to_state: str) -> dict[str, Any]:
    return {"seq": seq, "job_id": "job_1", "to": to_state, "created_at": 1_700_000_000}


def test_a_request_plan_backs_off_after_a_lost_connection_then_returns_the_answer() -> None:
    plan = client()._plan_request("GET", "/v1/jobs/job_1")
    step = next(plan)
    assert isinstance(step, _steps.Send) and step.request.url.path == "/v1/jobs/job_1"
    sleep = plan.throw(httpx.ConnectError("refused"))
    assert isinstance(sleep, _steps.Sleep) and 0 <= sleep.seconds <= 1.0
    again = plan.send(None)
    assert isinstance(again, _steps.Send) and again.request is step.request
    with pytest.raises(StopIteration) as done:
        plan.send(ok(job_json()))
    assert done.value.value.status_code == 200


def test_a_wait_plan_reads_the_clock_and_gives_up_past_its_deadline() -> None:
    plan = client()._plan_wait("job_1", 5.0, None)
    assert isinstance(next(plan), _steps.Clock)
    assert isinstance(plan.send(100.0), _steps.Clock)  # the deadline is 105
    first = plan.send(100.0)
    assert isinstance(first, _steps.Clock)  # when the request starts
    send = plan.send(100.0)
    assert isinstance(send, _steps.Send) and "wait" not in send.request.url.params
    assert isinstance(plan.send(problem(503, "overloaded", retry_after=30)), _steps.Clock)
    with pytest.raises(WaitTimeout):
        plan.send(101.0)  # 101 + 30 s of Retry-After is past the deadline


def test_a_follow_plan_resumes_a_dropped_stream_from_the_last_event() -> None:
    run = _steps.Run(client()._plan_events("job_1", 0, 8))
    steps = iter(run)
    emitted: list[JobEvent] = []
    resumed_from: list[str | None] = []
    lines = [sse(event(1, "queued"), event(2, "running")), sse(event(3, "succeeded"))]
    current: list[str] = []
    for step in steps:
        if isinstance(step, _steps.Send):
            resumed_from.append(step.request.headers.get("Last-Event-ID"))
            current = lines.pop(0)
            run.answer(httpx.Response(200, headers={"Content-Type": "text/event-stream"}))
        elif isinstance(step, _steps.NextLine):
            if current:
                run.answer(current.pop(0))
            elif lines:  # the first stream breaks after two events
                run.fail(httpx.ReadError("connection reset"))
        elif isinstance(step, _steps.Emit):
            emitted.append(step.item)
    assert [e.seq for e in emitted] == [1, 2, 3]
    assert resumed_from == [None, "2"]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda c: c.submit("/v1/chat/completions", {}, priorty=3), "priorty"),
        (lambda c: c.list(statuses="queued"), "statuses"),
        (lambda c: c.iter_jobs(page=5), "page"),
    ],
)
def test_an_unknown_keyword_is_a_type_error_at_once(call: Any, name: str) -> None:
    with client() as c, pytest.raises(TypeError, match=f"unexpected keyword argument '{name}'"):
        call(c)


async def test_the_async_client_refuses_unknown_keywords_too() -> None:
    async with AsyncClient(URL, KEY) as c:
        with pytest.raises(TypeError, match="unexpected keyword argument 'priorty'"):
            await c.submit("/v1/chat/completions", {}, priorty=3)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="unexpected keyword argument 'page'"):
            c.iter_jobs(page=5)  # type: ignore[call-arg]


def test_both_twins_run_the_same_plans() -> None:
    shared = {name for name in vars(Client.__mro__[1]) if name.startswith("_plan_")}
    assert {"_plan_request", "_plan_wait", "_plan_follow", "_plan_resume"} <= shared
    for twin in (Client, AsyncClient):
        assert not {name for name in vars(twin) if name.startswith("_plan_")}
