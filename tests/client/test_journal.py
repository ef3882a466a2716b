"""The operation journal on a mock server: recorded before sending, settled by resume()."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from jobgate.client import (
    APIConnectionError,
    ClientError,
    IdempotencyKeyReusedError,
    Journal,
    RateLimitError,
)
from tests.client.fakes import (
    URL,
    FakeClock,
    FakeTimeAsyncClient,
    FakeTimeClient,
    job_json,
    problem,
)

BODY = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}


class FakeServer:
    """Remembers idempotency keys like the real one: a repeat answers the original job."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}  # key -> job id
        self.status: dict[str, str] = {}
        self.requests: list[httpx.Request] = []
        self.fail_next: list[Exception | httpx.Response] = []
        self.on_request: Callable[[httpx.Request], None] = lambda request: None

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.on_request(request)
        if self.fail_next:
            failure = self.fail_next.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return failure
        if request.method == "POST" and request.url.path == "/v1/jobs":
            key = request.headers["Idempotency-Key"]
            replayed = key in self.jobs
            job_id = self.jobs.setdefault(key, f"job_{len(self.jobs) + 1}")
            self.status.setdefault(job_id, "queued")
            headers = {"Idempotent-Replayed": "true"} if replayed else {}
            return httpx.Response(202, json=job_json(job_id, self.status[job_id]), headers=headers)
        job_id = request.url.path.rsplit("/", 1)[-1]
        if job_id not in self.status:
            return problem(404, "not_found")
        return httpx.Response(200, json=job_json(job_id, self.status[job_id]))


def client_for(server: FakeServer, journal: Path, **kw: object) -> FakeTimeClient:
    return FakeTimeClient(server.handler, FakeClock(), journal=str(journal), **kw)


def test_the_operation_is_durable_before_the_request_is_sent(tmp_path: Path) -> None:
    server = FakeServer()
    path = tmp_path / "ops.db"
    at_send: list[tuple[str, str, int]] = []

    def look(request: httpx.Request) -> None:
        reader = Journal(path)  # another connection: sees only what was committed
        (op,) = reader.unfinished(URL)
        reader.close()
        at_send.append((op.id, op.state, op.sends))
        assert request.headers["Idempotency-Key"] == op.id
        assert json.loads(request.content) == op.request

    server.on_request = look
    with client_for(server, path) as client:
        job = client.submit("/v1/chat/completions", BODY)
        (op,) = client.journal.operations()  # type: ignore[union-attr]
    assert at_send == [(op.id, "pending", 1)]
    assert (op.state, op.job_id, op.job_status) == ("accepted", job.id, "queued")


def test_resume_resends_an_unknown_outcome_with_the_same_key_and_bytes(tmp_path: Path) -> None:
    server = FakeServer()
    # The first send reaches the server, which creates the job, but the answer is lost.
    server.fail_next = []
    with client_for(server, tmp_path / "ops.db", max_retries=0) as client:

        def lose_answer(request: httpx.Request) -> None:
            if request.method == "POST" and not server.jobs:
                server.jobs[request.headers["Idempotency-Key"]] = "job_1"
                server.status["job_1"] = "queued"
                raise httpx.ReadError("connection reset before the answer")

        server.on_request = lose_answer
        with pytest.raises(APIConnectionError) as caught:
            client.submit("/v1/chat/completions", BODY)
        assert caught.value.outcome_unknown
        (op,) = client.journal.unfinished(URL)  # type: ignore[union-attr]
        assert (op.state, op.job_id) == ("pending", None)

        server.on_request = lambda request: None
        (resumed,) = client.resume()
    assert (resumed.state, resumed.job_id, resumed.sends) == ("accepted", "job_1", 2)
    assert resumed.job is not None and resumed.job.id == "job_1"
    posts = [r for r in server.requests if r.method == "POST"]
    assert len(posts) == 2 and posts[0].content == posts[1].content
    assert {r.headers["Idempotency-Key"] for r in posts} == {op.id}
    assert len(set(server.jobs.values())) == 1  # no duplicate job


def test_resume_refreshes_accepted_operations_until_their_job_finishes(tmp_path: Path) -> None:
    server = FakeServer()
    with client_for(server, tmp_path / "ops.db") as client:
        job = client.submit("/v1/chat/completions", BODY)
        server.status[job.id] = "running"
        (op,) = client.resume()
        assert (op.state, op.job_status) == ("accepted", "running")
        server.status[job.id] = "succeeded"
        (op,) = client.resume()
        assert (op.state, op.job_status) == ("finished", "succeeded")
        assert client.resume() == []  # nothing unfinished remains
    assert [r.method for r in server.requests] == ["POST", "GET", "GET"]


def test_reads_keep_the_journal_current(tmp_path: Path) -> None:
    server = FakeServer()
    with client_for(server, tmp_path / "ops.db") as client:
        job = client.submit("/v1/chat/completions", BODY)
        server.status[job.id] = "cancelled"
        client.get(job.id)
        (op,) = client.journal.operations()  # type: ignore[union-attr]
    assert (op.state, op.job_status) == ("finished", "cancelled")


def test_a_refused_request_is_final_but_a_rate_limit_is_not(tmp_path: Path) -> None:
    server = FakeServer()
    with client_for(server, tmp_path / "ops.db", max_retries=0) as client:
        server.fail_next = [problem(422, "idempotency_key_reused")]
        with pytest.raises(IdempotencyKeyReusedError):
            client.submit("/v1/chat/completions", BODY, idempotency_key="k-1")
        server.fail_next = [problem(429, "queue_full", retry_after=1)]
        with pytest.raises(RateLimitError):
            client.submit("/v1/chat/completions", BODY, idempotency_key="k-2")
        states = {op.id: op.state for op in client.journal.operations()}  # type: ignore[union-attr]
        assert states == {"k-1": "rejected", "k-2": "pending"}
        rejected = client.journal.get("k-1")  # type: ignore[union-attr]
        assert rejected is not None and rejected.error == {
            "status": 422,
            "code": "idempotency_key_reused",
            "message": "detail of idempotency_key_reused",
        }
        (op,) = client.resume()  # only the rate-limited one is sent again
    assert (op.id, op.state) == ("k-2", "accepted")


def test_pending_operations_older_than_the_servers_key_retention_are_not_resent(
    tmp_path: Path,
) -> None:
    server = FakeServer()
    path = tmp_path / "ops.db"
    with client_for(server, path, max_retries=0) as client:
        server.fail_next = [httpx.ConnectError("refused")]
        with pytest.raises(APIConnectionError):
            client.submit("/v1/chat/completions", BODY)
    journal = Journal(path, key_ttl_s=-1.0)  # every key counts as expired
    with FakeTimeClient(server.handler, FakeClock(), journal=journal) as client:
        assert client.resume() == []
        (op,) = journal.operations()
    journal.close()
    assert op.state == "stale"
    assert [r.method for r in server.requests] == ["POST"]


def test_resume_leaves_another_servers_operations_alone(tmp_path: Path) -> None:
    server = FakeServer()
    path = tmp_path / "ops.db"
    journal = Journal(path)
    journal.record_send("op_other", base_url="http://elsewhere:8000", request=b'{"body": {}}')
    with client_for(server, path) as client:
        assert client.resume() == []
    assert journal.get("op_other").state == "pending"  # type: ignore[union-attr]
    journal.close()
    assert server.requests == []


def test_a_job_the_server_forgot_settles_its_operation(tmp_path: Path) -> None:
    server = FakeServer()
    with client_for(server, tmp_path / "ops.db") as client:
        job = client.submit("/v1/chat/completions", BODY)
        del server.status[job.id]
        (op,) = client.resume()
    assert op.state == "finished" and op.error is not None and op.error["code"] == "not_found"


def test_prune_forgets_only_settled_operations(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "ops.db")
    journal.record_send("a", base_url=URL, request=b"{}")
    journal.record_send("b", base_url=URL, request=b"{}")
    from jobgate.client import Job

    journal.record_job("b", Job.from_json(job_json("job_b", "succeeded")))
    assert journal.prune(older_than_s=-1.0) == 1
    assert [op.id for op in journal.operations()] == ["a"]
    journal.close()


def test_resume_needs_a_journal() -> None:
    with FakeTimeClient(FakeServer().handler, FakeClock()) as client:
        with pytest.raises(ClientError, match="journal"):
            client.resume()


async def test_the_async_client_journals_and_resumes_the_same_way(tmp_path: Path) -> None:
    server = FakeServer()
    path = tmp_path / "ops.db"
    async with FakeTimeAsyncClient(
        server.handler, FakeClock(), journal=str(path), max_retries=0
    ) as client:
        server.fail_next = [httpx.ConnectError("refused")]
        with pytest.raises(APIConnectionError):
            await client.submit("/v1/chat/completions", BODY)
        (op,) = await client.resume()
        assert (op.state, op.job_id, op.sends) == ("accepted", "job_1", 2)
        server.status["job_1"] = "succeeded"
        await client.get("job_1")
        (op,) = client.journal.operations()  # type: ignore[union-attr]
        assert op.state == "finished"
