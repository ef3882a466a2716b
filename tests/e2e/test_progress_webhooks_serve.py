"""Progress webhooks through a real `jobgate serve` and real receivers, on both backends: a job
streaming slowly sends verified `job.progress` events to the endpoint that lists them, no
oftener than its interval, with output tokens that only grow, all before its terminal event;
an endpoint with no event types hears only the end, as before."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from jobgate.client.webhooks import verify_webhook
from jobgate.testing.receiver import Received, Reply, WebhookReceiver
from tests.support.processes import ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

PROMPT = "tell a slow story " * 12  # echoed back: 216 characters, about 54 tokens


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'jobgate.db'}"
    return str(request.getfixturevalue("pg_dsn"))


def _endpoint(http: httpx.Client, url: str, **fields: Any) -> str:
    answer = http.post("/v1/webhook_endpoints", json={"url": url, **fields})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["secret"])


def test_a_slow_stream_sends_throttled_progress_then_its_end(
    harness: ProcessHarness, database_url: str, receiver: WebhookReceiver
) -> None:
    harness.env.update({
        "JOBGATE_DATABASE_URL": database_url,
        "JOBGATE_WEBHOOK_ALLOW_HTTP": "1",
        "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.0/8",
    })  # fmt: skip
    harness.run("migrate")
    key = harness.create_tenant("acme")
    serve = harness.start("serve")
    assert serve.url is not None
    arrivals: list[float] = []

    def answer(_request: Received, _index: int) -> Reply:
        arrivals.append(time.monotonic())
        return Reply()

    receiver.script = answer
    with (
        WebhookReceiver() as plain,
        httpx.Client(
            base_url=serve.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as http,
    ):
        secret = _endpoint(
            http,
            receiver.url,
            event_types=["job.progress", "job.succeeded"],
            progress_interval_s=1,
        )
        _endpoint(http, plain.url)
        submitted = http.post(
            "/v1/jobs",
            json={
                "endpoint": "/v1/chat/completions",
                "body": {
                    "model": "sim-echo",
                    "messages": [{"role": "user", "content": PROMPT}],
                    "max_tokens": 100,
                    "sim": {"latency_s": 6.0, "chunks": 30},
                },
                "stream": True,
            },
        )
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]

        def ended() -> bool:
            return any(
                orjson.loads(r.body)["type"] == "job.succeeded" for r in receiver.received
            ) and bool(plain.received)

        wait_until(ended, timeout_s=60, what="the terminal event at both endpoints")
        time.sleep(1.5)  # a late progress would arrive now
        events = [verify_webhook(r.body, r.headers, secret) for r in receiver.received]
        plain_types = [orjson.loads(r.body)["type"] for r in plain.received]

    assert plain_types == ["job.succeeded"]
    types = [e["type"] for e in events]
    assert types[-1] == "job.succeeded" and set(types[:-1]) == {"job.progress"}, types
    progress = [e["data"] for e in events[:-1]]
    assert 3 <= len(progress) <= 8, progress  # a 6 s stream at one a second at most
    assert all(p["id"] == job_id and p["status"] == "running" for p in progress)
    tokens = [p["output_tokens"] for p in progress]
    assert tokens == sorted(tokens) and tokens[-1] > tokens[0] > 0
    assert all(0 < p["progress"] < 1 for p in progress)
    assert len({e["id"] for e in events}) == len(events)  # one webhook-id per event
    sent = arrivals[: len(progress)]
    gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
    assert min(gaps) > 0.8, gaps  # the endpoint's interval, give or take a send's latency
