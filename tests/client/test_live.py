"""The client against a real `jobgate serve` process."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx
import pytest

from jobgate.client import (
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    IdempotencyKeyReusedError,
    Job,
    NotDeadLetteredError,
    NotFoundError,
)
from tests.client.server import JobgateServer, wait_until

pytestmark = pytest.mark.e2e


def chat(text: str, **sim: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "sim-echo", "messages": [{"role": "user", "content": text}]}
    if sim:
        body["sim"] = sim
    return body


class Recording(httpx.HTTPTransport):
    """Notes each request as it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return super().handle_request(request)


def test_wait_returns_on_the_transition_with_long_poll(served: JobgateServer) -> None:
    transport = Recording()
    with Client(served.url, served.api_key, long_poll_s=50, transport=transport) as client:
        job = client.submit("/v1/chat/completions", chat("wait for me", fail_with="hang"))
        wait_until(lambda: client.get(job.id).status == "running", message="job running")
        transport.sent.clear()
        result: list[Job] = []
        waiter = threading.Thread(target=lambda: result.append(client.wait(job.id, timeout_s=120)))
        waiter.start()
        # a plain read, then the long poll
        wait_until(lambda: len(transport.sent) == 2, message="the long poll was sent")
        time.sleep(1.0)  # let it reach the server and park there
        assert waiter.is_alive()  # held: the job is still running
        cancelled_at = time.monotonic()
        client.cancel(job.id)
        waiter.join(timeout=60)
        returned_after_s = time.monotonic() - cancelled_at
    assert result and result[0].status == "cancelled"
    read, poll = [r for r in transport.sent if r.url.path == f"/v1/jobs/{job.id}"]
    assert "wait" not in read.url.params
    assert poll.url.params["wait"] == "50"  # one held request answered on the transition,
    assert returned_after_s < 40  # not at the end of its 50 s window


async def test_async_client_follows_a_job_by_sse_and_long_poll(served: JobgateServer) -> None:
    async with AsyncClient(served.url, served.api_key) as client:
        job = await client.submit("/v1/chat/completions", chat("stream me", latency_s=0.5))
        events = [(e.from_status, e.to_status) async for e in client.events(job.id)]
        done = await client.wait(job.id, timeout_s=60)
        log = await client.event_log(job.id)
    assert events == [(None, "queued"), ("queued", "running"), ("running", "succeeded")]
    assert [(e.from_status, e.to_status) for e in log.data] == events
    assert done.status == "succeeded" and done.output_text == "echo: stream me"


def test_sse_resumes_from_a_given_event(served: JobgateServer) -> None:
    with Client(served.url, served.api_key) as client:
        job = client.submit("/v1/chat/completions", chat("resume", latency_s=0.2))
        client.wait(job.id, timeout_s=60)
        assert [e.seq for e in client.events(job.id, after=1)] == [2, 3]


def test_idempotent_submit_against_the_server(served: JobgateServer) -> None:
    with Client(served.url, served.api_key) as client:
        first = client.submit("/v1/chat/completions", chat("once"), idempotency_key="order-1")
        again = client.submit("/v1/chat/completions", chat("once"), idempotency_key="order-1")
        assert again.id == first.id
        with pytest.raises(IdempotencyKeyReusedError) as caught:
            client.submit("/v1/chat/completions", chat("other"), idempotency_key="order-1")
    assert caught.value.status == 422 and caught.value.code == "idempotency_key_reused"


def test_dead_letter_list_and_redrive(served: JobgateServer) -> None:
    with Client(served.url, served.api_key) as client:
        job = client.submit(
            "/v1/chat/completions", chat("poison", fail_with="server_error"), max_attempts=1
        )
        failed = client.wait(job.id, timeout_s=60)
        assert failed.status == "failed" and failed.dead_lettered
        assert failed.error is not None and failed.error.code == "server_error"
        assert job.id in {j.id for j in client.iter_jobs(dead_lettered=True)}
        redriven = client.retry(job.id)
        assert redriven.status == "queued"
        ok = client.submit("/v1/chat/completions", chat("fine"))
        client.wait(ok.id, timeout_s=60)
        with pytest.raises(NotDeadLetteredError):
            client.retry(ok.id)


def test_list_and_iter_jobs_search(served: JobgateServer) -> None:
    with Client(served.url, served.api_key) as client:
        tag = {"search": uuid.uuid4().hex}  # this test's jobs among the server's others
        ids = [
            client.submit("/v1/chat/completions", chat(f"n{i}"), metadata=tag).id for i in range(3)
        ]
        found = [j.id for j in client.iter_jobs(metadata=tag, page_size=2, model="sim-echo")]
        assert found == ids[::-1]
        created = client.get(ids[0]).created_at
        page = client.list(metadata=tag, created_after=created, provider="sim", limit=10)
        assert {j.id for j in page.data} == set(ids)
        assert client.list(metadata=tag, created_before=created).data == []
        assert client.list(metadata={**tag, "other": "x"}).data == []
        with pytest.raises(BadRequestError):
            client.list(metadata={"k" * 65: "v"})


def test_list_pages_delete_and_errors(served: JobgateServer) -> None:
    with Client(served.url, served.api_key) as client:
        ids = [client.submit("/v1/chat/completions", chat(f"n{i}")).id for i in range(3)]
        everything = [j.id for j in client.iter_jobs(page_size=1)]
        assert everything[:3] == ids[::-1]  # newest first, across pages
        page = client.list(limit=2)
        assert len(page.data) == 2 and page.has_more and page.last_id == page.data[-1].id
        deleted = client.delete(ids[0])
        assert deleted.purged and deleted.result is None
        with pytest.raises(NotFoundError):
            client.get("job_does_not_exist")
    with Client(served.url, "jg_wrong") as stranger, pytest.raises(AuthenticationError):
        stranger.get(ids[0])
