"""Live output streaming with real processes: a client that drops resumes on a DIFFERENT API
process (PostgreSQL: the appends wake it by NOTIFY) and gets exactly the remaining events, on
the native surface and through the `openai` SDK in strict mode; a worker killed mid-stream
leads to a new attempt whose stream the reader is told of by a reset (both backends)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.e2e.support import create_tenant, job_body
from tests.support.processes import ProcessHarness

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

Event = tuple[float, str, Any, str | None]  # arrival (monotonic s), event, data, id


def _stream(url: str, key: str, job_id: str, *, last_id: str | None = None) -> Iterator[Event]:
    headers = {"Authorization": f"Bearer {key}"}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    with httpx.Client(base_url=url, timeout=60) as http:
        with http.stream("GET", f"/v1/jobs/{job_id}/stream", headers=headers) as answer:
            assert answer.status_code == 200, answer.read()
            event, data, event_id = "message", "", None
            for line in answer.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif line.startswith("id: "):
                    event_id = line[4:]
                elif line == "" and data:
                    yield time.monotonic(), event, orjson.loads(data), event_id
                    event, data, event_id = "message", "", None


def _submit(url: str, key: str, prompt: str, **sim: Any) -> str:
    body = {**job_body(prompt, **sim), "stream": True}
    answer = httpx.post(
        f"{url}/v1/jobs", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def _text(events: list[Event]) -> str:
    return "".join(data["text"] for _, kind, data, _ in events if kind == "output.delta")


@pytest.mark.postgres
def test_resume_on_another_api_process_gives_exactly_the_rest_postgres(
    harness: ProcessHarness, pg_dsn: str
) -> None:
    harness.env["JOBGATE_DATABASE_URL"] = pg_dsn
    first_api, second_api = harness.start("api"), harness.start("api")
    harness.start("worker")
    assert first_api.url and second_api.url
    key = create_tenant(pg_dsn, "acme")
    job_id = _submit(first_api.url, key, "carry on elsewhere", latency_s=6.0, chunks=12)
    before: list[Event] = []
    for event in _stream(first_api.url, key, job_id):
        before.append(event)
        if sum(1 for e in before if e[1] == "output.delta") == 3:
            break  # the connection drops
    last_id = before[-1][3]
    assert last_id is not None
    after = list(_stream(second_api.url, key, job_id, last_id=last_id))
    assert after[-1][1] == "job.succeeded"
    result = after[-1][2]["result"]["choices"][0]["message"]["content"]
    assert _text(before) + _text(after) == result == "echo: carry on elsewhere"
    seqs = [data["seq"] for _, kind, data, _ in before + after if kind == "output.delta"]
    assert seqs == list(range(1, len(seqs) + 1))  # no duplicate, no gap
    deltas_after = [e for e in after if e[1] == "output.delta"]
    # Live on the second process too: its deltas came as they were written, not at the end.
    assert deltas_after[0][0] < after[-1][0] - 0.5

    client = openai.OpenAI(
        base_url=f"{first_api.url}/v1",
        api_key=key,
        max_retries=0,
        _strict_response_validation=True,
    )
    elsewhere = openai.OpenAI(
        base_url=f"{second_api.url}/v1",
        api_key=key,
        max_retries=0,
        _strict_response_validation=True,
    )
    with client, elsewhere:
        seen: list[Any] = []
        stream = client.responses.create(
            model="sim-echo",
            input="sdk across processes",
            background=True,
            stream=True,
            extra_body={"sim": {"latency_s": 2.0, "chunks": 8}},
        )
        for sdk_event in stream:
            seen.append(sdk_event)
            if sdk_event.type == "response.output_text.delta":
                break
        stream.close()
        rest = list(
            elsewhere.responses.retrieve(
                seen[0].response.id, stream=True, starting_after=seen[-1].sequence_number
            )
        )
        everything = seen + rest
        assert [e.sequence_number for e in everything] == list(range(len(everything)))
        text = "".join(e.delta for e in everything if e.type == "response.output_text.delta")
        assert everything[-1].type == "response.completed", everything[-1].response.error
        assert text == everything[-1].response.output_text == "echo: sdk across processes"


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'jobgate.db'}"
    return str(request.getfixturevalue("pg_dsn"))


def test_a_worker_killed_mid_stream_is_announced_by_a_reset(
    harness: ProcessHarness, database_url: str
) -> None:
    harness.env["JOBGATE_DATABASE_URL"] = database_url
    harness.run("migrate")
    key = harness.create_tenant("acme")
    api = harness.start("api")
    harness.start("reaper")
    doomed = harness.start("worker")
    assert api.url is not None
    job_id = _submit(api.url, key, "second time lucky", latency_s=4.0, chunks=8)
    seen: list[Event] = []
    replacement = None
    for event in _stream(api.url, key, job_id):
        seen.append(event)
        if replacement is None and sum(1 for e in seen if e[1] == "output.delta") == 2:
            doomed.kill()  # kill -9 mid-stream: its lease runs out, the reaper requeues
            replacement = harness.start("worker")
    kinds = [kind for _, kind, _, _ in seen]
    assert kinds[-1] == "job.succeeded" and "output.reset" in kinds
    reset = kinds.index("output.reset")
    first_attempt, second_attempt = seen[:reset], seen[reset + 1 :]
    assert 2 <= len(first_attempt) < 8
    result = seen[-1][2]["result"]["choices"][0]["message"]["content"]
    assert _text(second_attempt) == result == "echo: second time lucky"
    assert seen[reset][2]["generation"] == 2 and seen[reset][3] is None
