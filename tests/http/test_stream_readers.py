"""Live stream readers over real HTTP, on both backends: the readers of one job in one process
share one feed (an append costs one read of storage, not one per reader), a tenant's readers
are bounded (429 problem+json beyond the bound, on every live route, while another tenant is
served), a failing read is retried without losing the stream, and a stream the server cannot
carry on ends after a whole event, where the client resumes with Last-Event-ID.

The job is driven through storage (claim, append, finish), so every step is deterministic."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.services import live_feeds
from jobgate.storage.protocol import Storage
from tests.api_server import Api
from tests.storage.helpers import finish_one

READERS = 40
Event = tuple[str, Any, str | None]  # event, data, id


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url="sqlite:///unused.db", stream_readers_per_tenant=READERS)


async def _submit(api: Api, key: str, *, responses: bool = False) -> str:
    headers = {"Authorization": f"Bearer {key}"}
    if responses:
        body: dict[str, Any] = {"model": "sim-echo", "input": "x", "background": True}
        answer = await api.http.post("/v1/responses", json=body, headers=headers)
        assert answer.status_code == 200, answer.text
    else:
        chat = {"model": "sim-echo", "messages": [{"role": "user", "content": "x"}]}
        payload = {"endpoint": "/v1/chat/completions", "body": chat, "stream": True}
        answer = await api.http.post("/v1/jobs", json=payload, headers=headers)
        assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


async def _claim(storage: Storage, job_id: str) -> Lease:
    (claimed,) = await storage.job_claim(worker_id="w1", limit=1, lease_ttl_s=60)
    assert claimed.id == job_id
    return Lease(job_id, claimed.lease_token or "")


async def _finish(storage: Storage, lease: Lease) -> None:
    result = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]}
    finish = Finish(
        lease=lease, state=JobState.SUCCEEDED, reason="provider_succeeded", result=result
    )
    await finish_one(storage, finish=finish)


class Reader:
    """One client reading an SSE route to its end, keeping every event."""

    def __init__(self, api: Api, key: str, path: str, headers: dict[str, str] | None = None):
        self.events: list[Event] = []
        self.status = 0
        self.opened = asyncio.Event()
        auth = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        self.task = asyncio.create_task(self._read(api, path, {**auth, **(headers or {})}))

    async def _read(self, api: Api, path: str, headers: dict[str, str]) -> None:
        async with httpx.AsyncClient(base_url=api.url, timeout=60) as http:
            async with http.stream("GET", path, headers=headers) as answer:
                self.status = answer.status_code
                self.opened.set()
                event, data, event_id = "message", "", None
                async for line in answer.aiter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        data = line[6:]
                    elif line.startswith("id: "):
                        event_id = line[4:]
                    elif line == "" and data:
                        self.events.append((event, orjson.loads(data), event_id))
                        event, data, event_id = "message", "", None

    def kinds(self) -> list[str]:
        return [event for event, _, _ in self.events]

    def deltas(self) -> list[str]:
        return [data["text"] for event, data, _ in self.events if event == "output.delta"]


async def _until(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():  # noqa: ASYNC110 (the server runs on its own tasks)
            await asyncio.sleep(0.01)


@contextlib.contextmanager
def _counting(storage: Storage, name: str) -> Any:
    """Counts the calls of one storage method while inside."""
    counted = {"calls": 0}
    original = getattr(storage, name)

    async def counting(**kwargs: Any) -> Any:
        counted["calls"] += 1
        return await original(**kwargs)

    setattr(storage, name, counting)
    try:
        yield counted
    finally:
        delattr(storage, name)  # the class's method again


async def test_the_readers_of_a_job_share_one_feed(api: Api) -> None:
    """Each append, move and the finish cost a read or two of storage, however many readers."""
    storage = api.runtime.storage
    key = await api.key("acme")
    job_id = await _submit(api, key)
    lease = await _claim(storage, job_id)
    await storage.job_output_append(lease=lease, text="0 ")
    readers = [Reader(api, key, f"/v1/jobs/{job_id}/stream") for _ in range(READERS)]
    await _until(lambda: all(len(r.deltas()) == 1 for r in readers))
    assert api.runtime.feeds.feed_count == 1
    with (
        _counting(storage, "job_output_read") as chunk_reads,
        _counting(storage, "job_view") as job_reads,
    ):
        for n in range(1, 6):
            await storage.job_output_append(lease=lease, text=f"{n} ")
            await _until(lambda: all(len(r.deltas()) == n + 1 for r in readers))  # noqa: B023
        await _finish(storage, lease)
        await asyncio.gather(*(r.task for r in readers))
    for reader in readers:
        assert reader.status == 200
        assert "".join(reader.deltas()) == "0 1 2 3 4 5 "
        assert reader.kinds()[-1] == "job.succeeded"
    # One read per append and per wake-up of the feed; per reader it would be READERS x 6.
    assert chunk_reads["calls"] <= 12, chunk_reads
    assert job_reads["calls"] <= 6, job_reads
    await _until(lambda: api.runtime.feeds.feed_count == 0)
    assert api.runtime.storage.changes.stream_watch_count == 0


async def test_the_event_log_readers_share_one_feed(api: Api) -> None:
    storage = api.runtime.storage
    key = await api.key("acme")
    job_id = await _submit(api, key)
    readers = [Reader(api, key, f"/v1/jobs/{job_id}/events") for _ in range(READERS)]
    await _until(lambda: all(len(r.events) == 1 for r in readers))  # queued
    with _counting(storage, "job_events") as event_reads:
        lease = await _claim(storage, job_id)
        await _until(lambda: all(len(r.events) == 2 for r in readers))
        for n in range(3):  # appends move nothing in the log: no read for them
            await storage.job_output_append(lease=lease, text=f"{n}")
        await _finish(storage, lease)
        await asyncio.gather(*(r.task for r in readers))
    for reader in readers:
        assert [data["to"] for _, data, _ in reader.events] == ["queued", "running", "succeeded"]
    assert event_reads["calls"] <= 6, event_reads


async def _refused(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert int(answer.headers["retry-after"]) >= 1
    problem = answer.json()
    assert problem["code"] == "too_many_streams"
    assert problem["limit"] == "stream_readers_per_tenant"


async def test_a_tenants_readers_are_bounded_on_every_live_route(
    api: Api, settings: Settings
) -> None:
    key, other = await api.key("acme"), await api.key("other")
    job_id = await _submit(api, key)
    response_id = await _submit(api, key, responses=True)
    held = [Reader(api, key, f"/v1/jobs/{job_id}/stream") for _ in range(READERS)]
    for reader in held:
        await reader.opened.wait()
        assert reader.status == 200
    tenant = await api.runtime.tenants.authenticate(key)
    assert api.runtime.feeds.readers(tenant.id) == READERS
    auth = {"Authorization": f"Bearer {key}"}
    sse = {**auth, "Accept": "text/event-stream"}
    await _refused(await api.http.get(f"/v1/jobs/{job_id}/stream", headers=auth))
    await _refused(await api.http.get(f"/v1/jobs/{job_id}/events", headers=sse))
    await _refused(
        await api.http.get(f"/v1/responses/{response_id}", params={"stream": "true"}, headers=auth)
    )
    jobs_before = (await api.http.get("/v1/jobs", headers=auth)).json()["data"]
    create = {"model": "sim-echo", "input": "y", "background": True, "stream": True}
    await _refused(await api.http.post("/v1/responses", json=create, headers=auth))
    assert (await api.http.get("/v1/jobs", headers=auth)).json()["data"] == jobs_before
    # Another tenant is served meanwhile.
    theirs = await _submit(api, other)
    mine = Reader(api, other, f"/v1/jobs/{theirs}/stream")
    await mine.opened.wait()
    assert mine.status == 200
    # A reader that leaves gives its place back.
    held[0].task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await held[0].task
    await _until(lambda: api.runtime.feeds.readers(tenant.id) == READERS - 1)
    again = Reader(api, key, f"/v1/jobs/{job_id}/events")
    await again.opened.wait()
    assert again.status == 200
    for reader in [*held[1:], mine, again]:
        reader.task.cancel()
    await asyncio.gather(*(r.task for r in [*held[1:], mine, again]), return_exceptions=True)
    await _until(lambda: api.runtime.feeds.readers(tenant.id) == 0)


async def test_a_failing_read_is_retried_and_the_stream_goes_on(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = api.runtime.storage
    key = await api.key("acme")
    job_id = await _submit(api, key)
    lease = await _claim(storage, job_id)
    reader = Reader(api, key, f"/v1/jobs/{job_id}/stream")
    await reader.opened.wait()
    monkeypatch.setattr(live_feeds, "RETRY_S", (0.05,))
    failures = {"left": 3}
    original = storage.job_output_read

    async def flaky(**kwargs: Any) -> Any:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise errors.StorageUnavailable("database unreachable (test)")
        return await original(**kwargs)

    monkeypatch.setattr(storage, "job_output_read", flaky)
    await storage.job_output_append(lease=lease, text="still ")
    await storage.job_output_append(lease=lease, text="here")
    await _finish(storage, lease)
    await reader.task
    assert failures["left"] == 0
    assert "".join(reader.deltas()) == "still here"
    assert reader.kinds()[-1] == "job.succeeded"


async def test_a_stream_that_cannot_go_on_ends_where_the_client_resumes(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that started behind the feed's window reads the rest from storage itself; if
    that read fails, its stream ends after a whole event (no broken chunk), and a resume with
    Last-Event-ID gets exactly the rest."""
    storage = api.runtime.storage
    key = await api.key("acme")
    job_id = await _submit(api, key)
    lease = await _claim(storage, job_id)
    for n in range(6):
        await storage.job_output_append(lease=lease, text=f"{n}")
    ahead = Reader(api, key, f"/v1/jobs/{job_id}/stream?starting_after=5")  # the window: 6..
    await _until(lambda: ahead.deltas() == ["5"])
    original = storage.job_output_read
    calls = {"n": 0}

    async def failing_behind(**kwargs: Any) -> Any:
        if kwargs["after_seq"] < 4:  # only a reader behind the window reads there
            calls["n"] += 1
            if calls["n"] > 1:  # its first page read, then the database goes away
                raise errors.StorageUnavailable("database unreachable (test)")
            return await original(**{**kwargs, "limit": 2})
        return await original(**kwargs)

    monkeypatch.setattr(storage, "job_output_read", failing_behind)
    behind = Reader(api, key, f"/v1/jobs/{job_id}/stream")
    await behind.task  # ended cleanly: httpx read the whole (chunked) answer
    assert behind.status == 200
    assert behind.deltas() == ["0", "1"]
    assert "job.succeeded" not in behind.kinds()
    monkeypatch.setattr(storage, "job_output_read", original)
    last_id = behind.events[-1][2]
    assert last_id == "2"
    await _finish(storage, lease)
    resumed = Reader(api, key, f"/v1/jobs/{job_id}/stream", {"Last-Event-ID": last_id})
    await resumed.task
    assert resumed.deltas() == ["2", "3", "4", "5"]
    assert resumed.kinds()[-1] == "job.succeeded"
    await ahead.task


async def test_a_responses_stream_follows_the_shared_feed(api: Api) -> None:
    storage = api.runtime.storage
    key = await api.key("acme")
    response_id = await _submit(api, key, responses=True)
    lease = await _claim(storage, response_id)
    readers = [
        Reader(api, key, f"/v1/responses/{response_id}?stream=true") for _ in range(READERS // 4)
    ]
    await _until(lambda: all(len(r.events) >= 3 for r in readers))  # created, queued, running
    with _counting(storage, "job_output_read") as chunk_reads:
        await storage.job_output_append(lease=lease, text="echo: x")
        await _finish_response(storage, lease)
        await asyncio.gather(*(r.task for r in readers))
    for reader in readers:
        numbers = [data["sequence_number"] for _, data, _ in reader.events]
        assert numbers == list(range(len(numbers)))
        assert reader.kinds()[-1] == "response.completed"
    assert chunk_reads["calls"] <= 4, chunk_reads


async def _finish_response(storage: Storage, lease: Lease) -> None:
    result = {
        "id": "resp_up", "object": "response", "status": "completed", "model": "sim-echo",
        "output": [{"id": "msg_up", "type": "message", "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "echo: x", "annotations": []}]}],
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    }  # fmt: skip
    finish = Finish(
        lease=lease, state=JobState.SUCCEEDED, reason="provider_succeeded", result=result
    )
    await finish_one(storage, finish=finish)
