"""Request retries, the error tree, submit's Idempotency-Key, and parsing, on a mock server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from jobgate.client import (
    APIConnectionError,
    APIStatusError,
    AuthenticationError,
    BadRequestError,
    Client,
    CredentialsError,
    IdempotencyInProgressError,
    IdempotencyKeyReusedError,
    InternalServerError,
    Job,
    NotDeadLetteredError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    ServiceUnavailableError,
)
from jobgate.client._base import BaseClient, retry_after_s
from jobgate.client.models import output_text
from tests.client.fakes import FakeClock, FakeTimeClient, job_json, problem


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "invalid_request", BadRequestError),
        (401, "invalid_api_key", AuthenticationError),
        (403, "limit_exceeded", PermissionDeniedError),
        (404, "not_found", NotFoundError),
        (409, "idempotency_key_in_progress", IdempotencyInProgressError),
        (409, "job_not_dead_lettered", NotDeadLetteredError),
        (422, "idempotency_key_reused", IdempotencyKeyReusedError),
        (429, "queue_full", RateLimitError),
        (503, "storage_unavailable", ServiceUnavailableError),
        (500, "internal_error", InternalServerError),
        (418, "teapot", APIStatusError),
    ],
)
def test_problems_map_to_the_error_tree(status: int, code: str, cls: type) -> None:
    error = BaseClient.problem(problem(status, code, retry_after=4))
    assert type(error) is cls
    assert (error.status, error.code, error.type) == (status, code, f"/problems/{code}")
    assert error.message == f"detail of {code}"
    assert error.retry_after_s == 4.0
    assert str(error) == f"detail of {code} ({status} {code})"


def test_a_problem_without_code_falls_back_to_its_type_then_to_the_status() -> None:
    typed = httpx.Response(404, json={"type": "/problems/not_found", "detail": "gone"})
    assert isinstance(BaseClient.problem(typed), NotFoundError)
    assert BaseClient.problem(typed).code == "not_found"
    html = httpx.Response(502, text="<html>bad gateway</html>")
    error = BaseClient.problem(html)
    assert isinstance(error, InternalServerError) and error.code == "http_502"


def test_retry_after_reads_seconds_or_a_date_against_the_answers_own_date() -> None:
    assert retry_after_s(httpx.Response(429, headers={"Retry-After": "12"})) == 12.0
    dated = httpx.Response(
        503,
        headers={
            "Retry-After": "Wed, 21 Oct 2015 07:28:30 GMT",
            "Date": "Wed, 21 Oct 2015 07:28:00 GMT",
        },
    )
    assert retry_after_s(dated) == 30.0
    assert retry_after_s(httpx.Response(503, headers={"Retry-After": "soon"})) is None
    assert retry_after_s(httpx.Response(503)) is None


def test_requests_retry_429_and_503_no_sooner_than_retry_after() -> None:
    clock = FakeClock()
    answers = iter(
        [
            problem(429, "queue_full", retry_after=5),
            problem(503, "storage_unavailable", retry_after=2),
            httpx.Response(200, json=job_json()),
        ]
    )
    with FakeTimeClient(lambda r: next(answers), clock, max_retries=2) as client:
        assert client.get("job_1").id == "job_1"
    assert clock.sleeps[0] >= 5 and clock.sleeps[1] >= 2


def test_retries_stop_at_max_retries() -> None:
    clock = FakeClock()
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return problem(503, "storage_unavailable", retry_after=1)

    with FakeTimeClient(handler, clock, max_retries=3) as client:
        with pytest.raises(ServiceUnavailableError):
            client.get("job_1")
    assert len(calls) == 4


def test_a_redrive_is_not_repeated_when_its_outcome_is_unknown() -> None:
    clock = FakeClock()
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        raise httpx.ReadError("connection reset after sending")

    with FakeTimeClient(handler, clock) as client:
        with pytest.raises(APIConnectionError) as caught:
            client.retry("job_1")
        assert caught.value.outcome_unknown is True
        assert len(calls) == 1
        # …but a read is repeated (it changes nothing):
        with pytest.raises(APIConnectionError):
            client.get("job_1")
        assert len(calls) == 1 + 3


def test_a_request_that_never_left_is_repeated_even_when_not_idempotent() -> None:
    clock = FakeClock()
    answers: Iterator[httpx.Response | Exception] = iter(
        [httpx.ConnectError("refused"), httpx.Response(202, json=job_json())]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with FakeTimeClient(handler, clock) as client:
        assert client.retry("job_1").id == "job_1"


def test_every_submit_carries_an_idempotency_key_kept_across_retries() -> None:
    clock = FakeClock()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) == 1:
            raise httpx.ReadError("reset after the body was sent")
        if len(seen) == 2:
            return problem(409, "idempotency_key_in_progress", retry_after=1)
        return httpx.Response(202, json=job_json(), headers={"Idempotent-Replayed": "true"})

    with FakeTimeClient(handler, clock) as client:
        job = client.submit("/v1/chat/completions", {"model": "sim-echo", "messages": []})
    assert job.id == "job_1"
    keys = {r.headers["Idempotency-Key"] for r in seen}
    assert len(seen) == 3 and len(keys) == 1 and keys.pop().startswith("op_")
    assert len({r.content for r in seen}) == 1  # the same bytes each time
    sent = json.loads(seen[0].content)
    assert sent == {
        "endpoint": "/v1/chat/completions",
        "body": {"model": "sim-echo", "messages": []},
    }


def test_submit_sends_options_a_given_key_and_prefer_wait() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=job_json(status="succeeded"))

    with FakeTimeClient(handler, FakeClock()) as client:
        client.submit(
            "/v1/chat/completions",
            {"model": "m"},
            metadata={"order": 7},
            priority=1,
            max_attempts=2,
            idempotency_key="order-7",
            wait_s=90,
        )
    request = seen[0]
    assert request.headers["Idempotency-Key"] == "order-7"
    assert request.headers["Prefer"] == "wait=60"  # the server's maximum
    assert request.headers["Authorization"] == "Bearer jg_test"
    body = json.loads(request.content)
    assert body["metadata"] == {"order": 7} and body["priority"] == 1
    assert body["max_attempts"] == 2 and "provider" not in body


def test_list_sends_repeated_status_and_pages_through_iter_jobs() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        after = request.url.params.get("after")
        if after is None:
            page = {"data": [job_json("job_3"), job_json("job_2")], "has_more": True}
            return httpx.Response(200, json={**page, "object": "list", "last_id": "job_2"})
        page = {"data": [job_json("job_1")], "has_more": False, "last_id": "job_1"}
        return httpx.Response(200, json={**page, "object": "list"})

    with FakeTimeClient(handler, FakeClock()) as client:
        ids = [j.id for j in client.iter_jobs(status=["queued", "running"], page_size=2)]
    assert ids == ["job_3", "job_2", "job_1"]
    assert seen[0].url.params.get_list("status") == ["queued", "running"]
    assert seen[1].url.params["after"] == "job_2" and seen[1].url.params["limit"] == "2"


def test_iter_jobs_pages_on_through_partial_pages() -> None:
    """A search's page may be partial: fewer jobs than asked, even none, with has_more and a
    last_id that names a job not shown (where the server's walk stopped); iter_jobs pages on
    from it until has_more is false."""
    pages = {
        None: {"data": [job_json("job_9")], "has_more": True, "last_id": "job_7"},
        "job_7": {"data": [], "has_more": True, "last_id": "job_4"},
        "job_4": {"data": [job_json("job_2")], "has_more": False, "last_id": "job_2"},
    }
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        after = request.url.params.get("after")
        seen.append(after)
        return httpx.Response(200, json={**pages[after], "object": "list"})

    with FakeTimeClient(handler, FakeClock()) as client:
        assert [j.id for j in client.iter_jobs(model="m", page_size=2)] == ["job_9", "job_2"]
        page = client.list(model="m", after="job_7")
    assert seen == [None, "job_7", "job_4", "job_7"]
    assert page.data == [] and page.has_more and page.last_id == "job_4"


def test_list_and_iter_jobs_send_the_search() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"object": "list", "data": [], "has_more": False})

    since = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    search = {
        "model": "gpt-4.1-mini",
        "provider": "openai",
        "created_after": since,
        "created_before": 1796140800,
        "metadata": {"user": "alice", "a&b": "c=d"},
    }
    with FakeTimeClient(handler, FakeClock()) as client:
        client.list(**search, limit=5)  # type: ignore[arg-type]
        list(client.iter_jobs(**{**search, "created_before": 1796140800.5}))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="time zone"):
            client.list(created_after=datetime(2026, 12, 1))  # noqa: DTZ001 (the point)
    for request in seen:
        params = request.url.params
        assert params["model"] == "gpt-4.1-mini" and params["provider"] == "openai"
        assert params["created_after"] == "2026-12-01T14:00:00+00:00"
        assert params["metadata[user]"] == "alice" and params["metadata[a&b]"] == "c=d"
    assert [r.url.params["created_before"] for r in seen] == ["1796140800", "1796140800.5"]
    assert len(seen) == 2  # the naive datetime is refused before any request


def test_job_ids_are_escaped_in_paths() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return problem(404, "not_found")

    with FakeTimeClient(handler, FakeClock()) as client, pytest.raises(NotFoundError):
        client.get("../v1/jobs?x=1")
    assert seen[0].url.raw_path == b"/v1/jobs/..%2Fv1%2Fjobs%3Fx%3D1"


def test_models_parse_leniently_and_find_the_output_text() -> None:
    data = job_json(
        status="failed",
        error={"code": "rate_limit_exceeded", "message": "slow down", "type": "rate_limit_error"},
        future_field={"x": 1},
    )
    job = Job.from_json(data)
    assert job.terminal and job.error is not None and job.error.code == "rate_limit_exceeded"
    assert job.raw["future_field"] == {"x": 1}
    chat = {"choices": [{"message": {"role": "assistant", "content": "hi"}}]}
    messages = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    responses = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "c"}]}]}
    assert [output_text(r) for r in (chat, messages, responses, {}, None)] == [
        "hi",
        "ab",
        "c",
        None,
        None,
    ]


def test_credentials_come_from_env_then_the_file_jobgate_serve_saved(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    home = Path(str(tmp_path))
    for name in ("JOBGATE_URL", "JOBGATE_API_KEY", "JOBGATE_CREDENTIALS_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    with pytest.raises(CredentialsError, match=re.escape("no API key for http://127.0.0.1:8000")):
        Client()
    saved = home / "jobgate" / "credentials.json"
    saved.parent.mkdir()
    saved.write_text(json.dumps({"http://127.0.0.1:8000": {"api_key": "jg_saved"}}))
    with Client() as client:
        assert client.base_url == "http://127.0.0.1:8000"
        assert client._headers["Authorization"] == "Bearer jg_saved"
    monkeypatch.setenv("JOBGATE_URL", "http://other:9/")
    monkeypatch.setenv("JOBGATE_API_KEY", "jg_env")
    with Client() as client:
        assert client.base_url == "http://other:9"
        assert client._headers["Authorization"] == "Bearer jg_env"
    with Client(api_key="jg_arg") as client:
        assert client._headers["Authorization"] == "Bearer jg_arg"
