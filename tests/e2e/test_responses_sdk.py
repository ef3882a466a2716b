"""The official `openai` SDK (strict response validation) against `jobgate serve` as real
processes: with the built-in `sim` provider, and with the provider simulator server as an
upstream that has no Responses API and no background mode (Chat Completions only, `kind =
"openai"`, `mode = "sync"`): jobgate gives it background mode, cancellation and OpenAI-shaped
signed webhooks. Run with `-s` to see the transcript of SDK calls and answers."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from jobgate.testing.receiver import WebhookReceiver
from tests.support.processes import JobgateProcess, ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
WEBHOOK_ENV = {
    "JOBGATE_WEBHOOK_ALLOW_HTTP": "1",
    "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.0/8",
    "JOBGATE_WEBHOOK_RETRY_PROFILE": "short",
}


@dataclasses.dataclass
class Setup:
    name: str
    model: str  # what the SDK asks for
    upstream: bool  # behind jobgate: the simulator server (Chat Completions only)
    postgres: bool = False


SETUPS = [
    Setup("sim", "sim-echo", upstream=False),
    Setup("chat-upstream", "gpt-4.1-mini", upstream=True),
    Setup("chat-upstream-postgres", "upstream/gpt-4.1-mini", upstream=True, postgres=True),
]


class Transcript:
    def __init__(self, title: str) -> None:
        self.lines = [f"== {title}"]

    def __call__(self, call: str, answer: Any) -> None:
        self.lines.append(f">>> {call}")
        self.lines.append(f"    {answer}")

    def show(self) -> None:
        print("\n" + "\n".join(self.lines))


def start_simulator(harness: ProcessHarness) -> tuple[JobgateProcess, str]:
    process = harness.process("simulator", "--port", "0", "--no-responses-api").start()

    def listening() -> str | None:
        match = re.search(r"OpenAI base_url (http://\S+/v1)", process.stdout())
        if not process.alive:
            raise AssertionError(process.tail())
        return match.group(1) if match else None

    return process, wait_until(listening, timeout_s=60, what="the simulator")


@pytest.fixture(params=SETUPS, ids=[s.name for s in SETUPS])
def setup(request: pytest.FixtureRequest) -> Setup:
    chosen: Setup = request.param
    if chosen.postgres:
        request.applymarker(pytest.mark.postgres)
    return chosen


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


def test_sdk_flows(
    setup: Setup, tmp_path: Path, request: pytest.FixtureRequest, receiver: WebhookReceiver
) -> None:
    env = dict(WEBHOOK_ENV)
    if setup.postgres:
        env["JOBGATE_DATABASE_URL"] = request.getfixturevalue("pg_dsn")
    with ProcessHarness(tmp_path, env=env) as harness:
        try:
            if setup.upstream:
                simulator, base_url = start_simulator(harness)
                config = tmp_path / "jobgate.toml"
                config.write_text(
                    "[providers.upstream]\n"
                    'kind = "openai"\n'
                    f'base_url = "{base_url}"\n'
                    'mode = "sync"\n'
                    'responses_api = "chat_completions"\n'
                    'model_prefixes = ["gpt-"]\n'
                )
            serve = harness.start("serve")
            assert serve.url is not None
            flows(setup, serve.url, harness.default_api_key(serve.url), receiver)
            if setup.upstream:
                # The upstream has no Responses API: it served every response as a chat.
                assert httpx.post(f"{base_url}/responses", json={}).status_code == 404
                state = httpx.get(base_url.removesuffix("/v1") + "/_simulator/state").json()
                assert all(created.startswith("chatcmpl-") for created in state["created"])
                assert len(state["created"]) == 3  # report, the cancelled one, once
                assert simulator.alive
            assert not serve.log_lines_matching('"level":"error"'), serve.tail()
        except BaseException:
            print(harness.logs())
            raise


def flows(setup: Setup, url: str, key: str, receiver: WebhookReceiver) -> None:
    say = Transcript(f"jobgate serve ({setup.name}), model {setup.model!r}")
    client = openai.OpenAI(
        base_url=f"{url}/v1", api_key=key, max_retries=0, _strict_response_validation=True
    )
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    endpoint = http.post(
        "/v1/webhook_endpoints", json={"url": receiver.url, "event_types": ["response.completed"]}
    ).json()
    secret = endpoint["secret"]
    model = setup.model

    # 1. Background: create, then retrieve until completed.
    created = client.responses.create(model=model, input="Write the report", background=True)
    say(
        f"client.responses.create(model={model!r}, input='Write the report', background=True)",
        f"id={created.id} status={created.status} output={created.output} usage={created.usage}",
    )
    assert created.status == "queued" and created.id.startswith("resp_")
    done = until(client, created.id, "completed")
    say(
        f"client.responses.retrieve({created.id!r})  # until completed",
        f"status={done.status} output_text={done.output_text!r} usage={done.usage}",
    )
    assert done.output_text == "echo: Write the report"
    assert done.usage is not None and done.usage.input_tokens > 0
    assert done.usage.output_tokens > 0
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    job = http.get(f"/v1/jobs/{created.id}").json()
    say(f"GET /v1/jobs/{created.id}", {k: job[k] for k in ("status", "provider", "endpoint")})
    assert job["status"] == "succeeded"
    assert job["provider"] == ("upstream" if setup.upstream else "sim")

    # 2. Cancel while running, then again.
    slow = client.responses.create(
        model=model, input="Take your time", background=True, extra_body={"sim": {"latency_s": 60}}
    )
    running = until(client, slow.id, "in_progress")
    say(f"client.responses.retrieve({slow.id!r})", f"status={running.status}")
    started = time.monotonic()
    cancelled = client.responses.cancel(slow.id)
    say(f"client.responses.cancel({slow.id!r})", f"status={cancelled.status}")
    assert cancelled.status == "cancelled" and time.monotonic() - started < 10
    again = client.responses.cancel(slow.id)
    say(
        f"client.responses.cancel({slow.id!r})  # again",
        f"status={again.status} same_object={again.model_dump() == cancelled.model_dump()}",
    )
    assert again.model_dump() == cancelled.model_dump()
    finished_again = client.responses.cancel(done.id)
    assert finished_again.model_dump() == done.model_dump()

    # 3. Idempotency.
    key_header = {"Idempotency-Key": f"report-{setup.name}"}
    first = client.responses.create(
        model=model, input="once", background=True, extra_headers=key_header
    )
    second = client.responses.create(
        model=model, input="once", background=True, extra_headers=key_header
    )
    say(
        "client.responses.create(..., extra_headers={'Idempotency-Key': ...})  # twice",
        f"{first.id} == {second.id}: {first.id == second.id}",
    )
    assert first.id == second.id
    with pytest.raises(openai.UnprocessableEntityError) as reused:
        client.responses.create(
            model=model, input="a different body", background=True, extra_headers=key_header
        )
    say(
        "client.responses.create(<same key, different body>)",
        f"{type(reused.value).__name__}: {reused.value.code}",
    )

    # 4. Streaming retrieve, resumed after starting_after.
    events = list(client.responses.retrieve(done.id, stream=True))
    say(
        f"client.responses.retrieve({done.id!r}, stream=True)",
        [f"{e.sequence_number}:{e.type}" for e in events],
    )
    resumed = list(client.responses.retrieve(done.id, stream=True, starting_after=5))
    say(
        f"client.responses.retrieve({done.id!r}, stream=True, starting_after=5)",
        [f"{e.sequence_number}:{e.type}" for e in resumed],
    )
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [e.model_dump() for e in resumed] == [e.model_dump() for e in events[6:]]
    assert events[-1].type == "response.completed"

    # 5. A synchronous create that fails raises, as against OpenAI; the failed response stays
    # retrievable, and every status validates strictly (the client is strict).
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model=model, input="no", extra_body={"sim": {"fail_with": "invalid_request"}}
        )
    location = refused.value.response.headers["location"]
    failed = client.responses.retrieve(location.rsplit("/", 1)[-1])
    say(
        "client.responses.create(..., extra_body={'sim': {'fail_with': 'invalid_request'}})",
        f"{refused.value.status_code} {refused.value.body}; then status={failed.status} "
        f"error={failed.error}",
    )
    assert failed.status == "failed" and failed.error is not None
    assert failed.output == [] and failed.usage is None

    # 6. The webhook: OpenAI's SDK verifies and types jobgate's delivery.
    assert receiver.wait_for(1, timeout_s=30)
    delivery = next(r for r in receiver.received if json.loads(r.body)["data"]["id"] == done.id)
    event = openai.OpenAI(api_key="unused", webhook_secret=secret).webhooks.unwrap(
        delivery.body, delivery.headers
    )
    say("openai.OpenAI(webhook_secret=secret).webhooks.unwrap(body, headers)", repr(event))
    assert event.type == "response.completed" and event.data.id == done.id
    types = {json.loads(r.body)["type"] for r in receiver.received}
    assert types == {"response.completed"}  # the endpoint's filter
    say.show()
    client.close()
    http.close()


def until(client: openai.OpenAI, response_id: str, status: str) -> Response:
    """Retrieve until `status`, long-polling (`wait`: answer when the status changes)."""
    deadline = time.monotonic() + 60
    response = client.responses.retrieve(response_id)
    while response.status != status and time.monotonic() < deadline:
        response = client.responses.retrieve(response_id, extra_query={"wait": 2})
    assert response.status == status, response
    return response
