"""Live output streaming over real HTTP, on both backends: GET /v1/jobs/{id}/stream while the
job runs and after it finished, resumed by Last-Event-ID or starting_after, a reset when a new
attempt starts, webhooks once at completion, and /v1/responses streamed live through the
official `openai` SDK in strict mode (live, and resumed where the client dropped)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import openai
import orjson
import pytest

from jobgate.clock import SystemClock
from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.storage.protocol import Storage
from jobgate.testing import PacedClock, ScriptedProvider, SequentialIds
from jobgate.wire.content import split_evenly
from tests.api_server import Api
from tests.storage.helpers import finish_one, release

pytestmark = pytest.mark.asyncio
SLOW_CHUNKS = 10
SLOW = {"latency_s": 1.5, "chunks": SLOW_CHUNKS}


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        retry_base_s=0.05,
        retry_max_s=0.05,
        shutdown_grace_s=0,
        worker_poll_interval_s=0.1,
        webhook_allow_http=True,
        webhook_allow_cidrs=("127.0.0.0/8",),
    )


@pytest.fixture
def pace() -> PacedClock:
    """The simulator's clock: real sleeps (one before each delta it streams), all of them
    unless a test holds the simulator with `allow(n)` (n deltas, then it waits)."""
    return PacedClock()


@pytest.fixture
def runtime(
    storage: Storage, settings: Settings, scripted: ScriptedProvider, pace: PacedClock
) -> Runtime:
    """The simulator on the real clock: its deltas are spread over real seconds."""
    clock = SystemClock()
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=pace), "scripted": scripted},
        configs={
            "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",)),
            "scripted": ProviderConfig(kind="sim"),
        },
        default="sim",
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


class Gateway:
    def __init__(self, api: Api, key: str) -> None:
        self.api = api
        self.headers = {"Authorization": f"Bearer {key}"}
        self.key = key

    async def submit(self, prompt: str, *, stream: bool = True, **extra: Any) -> str:
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": prompt}]}
        payload = {"endpoint": "/v1/chat/completions", "body": body, "stream": stream, **extra}
        for member in ("sim", "max_tokens"):  # members of the provider's body
            if member in extra:
                body[member] = payload.pop(member)
        answer = await self.api.http.post("/v1/jobs", json=payload, headers=self.headers)
        assert answer.status_code == 202, answer.text
        return str(answer.json()["id"])

    async def events(
        self, job_id: str, *, stop_after: int | None = None, **options: Any
    ) -> list[tuple[float, str, Any, str | None]]:
        """(arrival s, event, data, id) of the job's stream; `stop_after` deltas, then drop."""
        started = time.monotonic()
        seen: list[tuple[float, str, Any, str | None]] = []
        headers = {**self.headers, **options.pop("headers", {})}
        async with self.api.http.stream(
            "GET", f"/v1/jobs/{job_id}/stream", headers=headers, **options
        ) as answer:
            assert answer.status_code == 200, await answer.aread()
            assert answer.headers["content-type"].startswith("text/event-stream")
            async for event, data, event_id in _sse(answer):
                seen.append((time.monotonic() - started, event, data, event_id))
                deltas = sum(1 for s in seen if s[1] == "output.delta")
                if stop_after is not None and deltas >= stop_after:
                    break
        return seen


async def _sse(answer: httpx.Response) -> AsyncIterator[tuple[str, Any, str | None]]:
    event, data, event_id = "message", "", None
    async for line in answer.aiter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line.startswith("id: "):
            event_id = line[4:]
        elif line == "" and data:
            yield event, orjson.loads(data), event_id
            event, data, event_id = "message", "", None


@pytest.fixture
async def gateway(api: Api, pace: PacedClock) -> AsyncIterator[Gateway]:
    worker = api.runtime.worker()
    running = asyncio.create_task(worker.run())
    try:
        yield Gateway(api, await api.key("acme"))
    finally:
        pace.run_free()  # a test that failed while holding the simulator
        worker.request_stop()
        await asyncio.wait_for(running, 30)


async def _until(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    """Wait for `condition`; the deadline is for a loaded machine (a pass does not pay it)."""
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 (the server runs on its own tasks)
            await asyncio.sleep(0.01)


def _text(events: list[tuple[float, str, Any, str | None]]) -> str:
    return "".join(data["text"] for _, kind, data, _ in events if kind == "output.delta")


def _first_pieces(text: str, held_after: int) -> str:
    """What the simulator streamed of `text` (in SLOW's chunks) before it was held."""
    return "".join(split_evenly(text, SLOW_CHUNKS)[:held_after])


async def test_deltas_arrive_before_the_job_completes(gateway: Gateway, pace: PacedClock) -> None:
    pace.allow(2)  # two deltas, then the simulator waits until the stream showed them
    job_id = await gateway.submit("a slow and steady answer", sim=SLOW)
    events: list[tuple[float, str, Any, str | None]] = []
    live = 0  # deltas seen while the job was running, the simulator held
    async with gateway.api.http.stream(
        "GET", f"/v1/jobs/{job_id}/stream", headers=gateway.headers
    ) as answer:
        assert answer.status_code == 200
        async for event, data, event_id in _sse(answer):
            events.append((0.0, event, data, event_id))
            if _text(events) == _first_pieces("echo: a slow and steady answer", 2):
                job = await gateway.api.http.get(f"/v1/jobs/{job_id}", headers=gateway.headers)
                assert job.json()["status"] == "running"  # the deltas came before the end
                live = sum(1 for e in events if e[1] == "output.delta")
                pace.run_free()
    deltas = [e for e in events if e[1] == "output.delta"]
    assert 0 < live < len(deltas)  # and the rest came on the same stream, afterwards
    terminal = events[-1]
    assert terminal[1] == "job.succeeded" and terminal[2]["status"] == "succeeded"
    result = terminal[2]["result"]["choices"][0]["message"]["content"]
    assert _text(events) == result == "echo: a slow and steady answer"
    assert [int(e[3] or 0) for e in deltas] == [d[2]["seq"] for d in deltas]


async def test_a_stream_resumes_exactly_where_the_client_dropped(gateway: Gateway) -> None:
    job_id = await gateway.submit("resume me please", sim=SLOW)
    first = await gateway.events(job_id, stop_after=2)
    last_id = first[-1][3]
    assert last_id is not None
    rest = await gateway.events(job_id, headers={"Last-Event-ID": last_id})
    assert _text(first) + _text(rest) == "echo: resume me please"
    seqs = [d[2]["seq"] for d in first + rest if d[1] == "output.delta"]
    assert seqs == list(range(1, len(seqs) + 1))  # no duplicate, no gap
    again = await gateway.events(job_id, params={"starting_after": last_id})
    assert [(e[1], e[2]) for e in again] == [(e[1], e[2]) for e in rest]


async def test_a_finished_job_is_served_from_its_log(gateway: Gateway) -> None:
    job_id = await gateway.submit("done already", sim={"chunks": 3})
    live = await gateway.events(job_id)
    replay = await gateway.events(job_id)
    assert [(e[1], e[3]) for e in replay] == [(e[1], e[3]) for e in live]
    assert _text(replay) == "echo: done already"


async def test_a_job_that_did_not_stream_gives_one_delta_at_completion(
    gateway: Gateway,
) -> None:
    job_id = await gateway.submit("whole", stream=False)
    events = await gateway.events(job_id)
    assert [(e[1], e[2]) for e in events[:-1]] == [
        ("output.delta", {"seq": 1, "text": "echo: whole"})
    ]
    assert events[-1][1] == "job.succeeded"
    after = await gateway.events(job_id, params={"starting_after": 1})
    assert [e[1] for e in after] == ["job.succeeded"]


async def test_a_new_attempt_is_announced_by_a_reset(api: Api) -> None:
    storage = api.runtime.storage
    key = await api.key("acme")
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "x"}]}
    answer = await api.http.post(
        "/v1/jobs", json={"endpoint": "/v1/chat/completions", "body": body, "stream": True},
        headers=headers,
    )  # fmt: skip
    job_id = answer.json()["id"]
    (first,) = await storage.job_claim(worker_id="w1", limit=1, lease_ttl_s=60)
    lease = Lease(job_id, first.lease_token or "")
    await storage.job_output_append(lease=lease, text="first attempt's ")
    await release(storage, leases=[lease], reason="test")  # as a reclaim would
    (second,) = await storage.job_claim(worker_id="w2", limit=1, lease_ttl_s=60)
    lease = Lease(job_id, second.lease_token or "")
    await storage.job_output_append(lease=lease, text="second ")
    await storage.job_output_append(lease=lease, text="attempt")
    finish = Finish(lease=lease, state=JobState.SUCCEEDED, reason="provider_succeeded",
                    result={"choices": []})  # fmt: skip
    await finish_one(storage, finish=finish)
    gateway = Gateway(api, key)
    events = await gateway.events(job_id)
    assert [(kind, data.get("seq"), event_id) for _, kind, data, event_id in events] == [
        ("output.delta", 1, "1"),
        ("output.reset", 2, None),
        ("output.delta", 2, "2"),
        ("output.delta", 3, "3"),
        ("job.succeeded", None, None),
    ]
    assert events[1][2]["generation"] == second.run_count
    resumed = await gateway.events(job_id, headers={"Last-Event-ID": "1"})
    assert [e[1] for e in resumed] == ["output.reset", "output.delta", "output.delta",
                                       "job.succeeded"]  # fmt: skip
    tail = await gateway.events(job_id, headers={"Last-Event-ID": "2"})
    assert [e[1] for e in tail] == ["output.delta", "job.succeeded"]


async def test_a_client_that_leaves_frees_its_place(gateway: Gateway) -> None:
    job_id = await gateway.submit("long", sim={"latency_s": 30, "chunks": 2})
    changes = gateway.api.runtime.storage.changes
    before = changes.stream_watch_count
    async with httpx.AsyncClient(base_url=gateway.api.url) as http:
        async with http.stream(
            "GET", f"/v1/jobs/{job_id}/stream", headers=gateway.headers
        ) as answer:
            assert answer.status_code == 200
            await _until(lambda: changes.stream_watch_count > before)
            assert changes.stream_watch_count == before + 1
    await _until(lambda: changes.stream_watch_count == before)


async def test_errors_before_the_stream_starts(gateway: Gateway) -> None:
    job_id = await gateway.submit("mine", sim={"chunks": 1})
    other = {"Authorization": f"Bearer {await gateway.api.key('other')}"}
    answer = await gateway.api.http.get(f"/v1/jobs/{job_id}/stream", headers=other)
    assert answer.status_code == 404
    bad = await gateway.api.http.get(
        f"/v1/jobs/{job_id}/stream", headers={**gateway.headers, "Last-Event-ID": "x1"}
    )
    assert bad.status_code in (400, 422), bad.text  # never a 5xx
    negative = await gateway.api.http.get(
        f"/v1/jobs/{job_id}/stream", params={"starting_after": -1}, headers=gateway.headers
    )
    assert negative.status_code in (400, 422)


async def test_webhooks_fire_once_at_completion(gateway: Gateway) -> None:
    job_id = await gateway.submit(
        "hooked", sim={"latency_s": 0.3, "chunks": 5},
        webhook={"url": "http://127.0.0.1:9/hook"},
    )  # fmt: skip
    events = await gateway.events(job_id)
    assert events[-1][1] == "job.succeeded" and len(events) > 2
    outbox = await gateway.api.runtime.storage.outbox_for_job(job_id=job_id)
    assert [entry.event_type for entry in outbox] == ["job.succeeded"]


# -- /v1/responses through the openai SDK (strict) -------------------------------------------


def _sdk(gateway: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{gateway.api.url}/v1",
        api_key=gateway.key,
        max_retries=0,
        _strict_response_validation=True,
    )


async def test_responses_stream_live_and_resume_with_the_sdk(
    gateway: Gateway, pace: PacedClock
) -> None:
    pace.allow(2)  # two deltas, then the simulator waits until the client has dropped
    async with _sdk(gateway) as client:
        stream = await client.responses.create(
            model="sim-echo",
            input="stream this live",
            background=True,
            stream=True,
            extra_body={"sim": SLOW},
        )
        seen: list[Any] = []
        text = ""
        async for event in stream:
            seen.append(event)
            if event.type == "response.output_text.delta":
                text += event.delta
                if text == _first_pieces("echo: stream this live", 2):
                    break  # the client drops; the job keeps running
        await stream.close()
        response_id = seen[0].response.id
        # live: what the client read came while the answer was still being written
        assert (await client.responses.retrieve(response_id)).status == "in_progress"
        pace.run_free()
        last = seen[-1].sequence_number
        rest = [
            e
            async for e in await client.responses.retrieve(
                response_id, stream=True, starting_after=last
            )
        ]
        everything = seen + rest
        numbers = [e.sequence_number for e in everything]
        assert numbers == list(range(len(everything)))
        text = "".join(e.delta for e in everything if e.type == "response.output_text.delta")
        assert everything[-1].type == "response.completed"
        final = everything[-1].response
        assert text == final.output_text == "echo: stream this live"
        kinds = [e.type for e in everything]
        assert kinds[:3] == ["response.created", "response.queued", "response.in_progress"]
        assert kinds.count("response.output_item.added") == 1
        replay = [e async for e in await client.responses.retrieve(response_id, stream=True)]
        assert [e.model_dump() for e in replay] == [e.model_dump() for e in everything]


async def test_a_new_attempt_of_a_response_streams_as_a_new_item_with_the_sdk(api: Api) -> None:
    storage = api.runtime.storage
    gateway = Gateway(api, await api.key("acme"))
    async with _sdk(gateway) as client:
        opened = await client.responses.create(
            model="sim-echo", input="x", background=True, stream=True
        )
        created = (await opened.__anext__()).response  # type: ignore[union-attr]
        await opened.close()  # a background response runs on without its stream
        (first,) = await storage.job_claim(worker_id="w1", limit=1, lease_ttl_s=60)
        lease = Lease(created.id, first.lease_token or "")
        await storage.job_output_append(lease=lease, text="abandoned ")
        await release(storage, leases=[lease], reason="test")
        (second,) = await storage.job_claim(worker_id="w2", limit=1, lease_ttl_s=60)
        lease = Lease(created.id, second.lease_token or "")
        await storage.job_output_append(lease=lease, text="echo: x")
        result = {
            "id": "resp_up", "object": "response", "status": "completed", "model": "sim-echo",
            "output": [{"id": "msg_up", "type": "message", "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "echo: x",
                                     "annotations": []}]}],
            "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
        }  # fmt: skip
        await finish_one(
            storage,
            finish=Finish(
                lease=lease, state=JobState.SUCCEEDED, reason="provider_succeeded", result=result
            ),
        )
        events = [e async for e in await client.responses.retrieve(created.id, stream=True)]
        items = [e for e in events if e.type == "response.output_item.done"]
        assert [(e.output_index, e.item.status) for e in items] == [  # type: ignore[union-attr]
            (0, "incomplete"),
            (1, "completed"),
        ]
        assert events[-1].type == "response.completed"
        assert events[-1].response.output_text == "echo: x"


async def test_a_running_stream_shows_its_tokens_so_far_as_progress(
    gateway: Gateway, pace: PacedClock
) -> None:
    """Issue 19: `output_tokens` streamed so far (characters / 4) and `progress` as their
    fraction of `max_tokens`, growing while the job runs; gone once it ended. The simulator
    is let go one delta at a time, so every step is seen while the job runs."""
    prompt = "tokens arrive one chunk after another " * 4  # 152 characters, 40 tokens echoed
    pace.allow(1)
    job_id = await gateway.submit(prompt, sim={"latency_s": 1.0, "chunks": 10}, max_tokens=80)

    async def job_once(ready: Callable[[Any], bool]) -> Any:
        """The job's view, polled until `ready` says so (a generous deadline)."""
        async with asyncio.timeout(30):
            while True:
                answer = await gateway.api.http.get(f"/v1/jobs/{job_id}", headers=gateway.headers)
                if ready(job := answer.json()):
                    return job
                await asyncio.sleep(0.02)

    seen: list[tuple[int, float]] = []
    for _ in range(3):
        so_far = seen[-1][0] if seen else 0
        job = await job_once(lambda job: job.get("output_tokens", 0) > so_far)  # noqa: B023
        assert job["status"] == "running"
        assert job["progress"] == pytest.approx(min(job["output_tokens"] / 80, 0.99))
        seen.append((job["output_tokens"], job["progress"]))
        pace.allow(1)  # the next delta
    pace.run_free()
    job = await job_once(lambda job: job["status"] == "succeeded")
    assert "output_tokens" not in job and job["progress"] is None
    assert len({tokens for tokens, _ in seen}) == 3, seen  # it grew while the job ran
    assert seen == sorted(seen)
    assert 0 < seen[-1][1] < 0.99
