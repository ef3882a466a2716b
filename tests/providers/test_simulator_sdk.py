"""Every payload the simulator server produces validates under the official `openai` and
`anthropic` SDK types, in strict mode: the SDK clients themselves talk to it with
`_strict_response_validation=True`, and each body is also checked for members outside the
published schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from openai.types.shared import ErrorObject
from openai.types.webhooks import UnwrapWebhookEvent

from jobgate.simulator.http11 import H11Server, Reply, Request
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock
from jobgate.wire import standard_webhooks
from tests.providers.sdk import anthropic_strict, openai_strict

pytestmark = pytest.mark.asyncio
SECRET = "whsec_" + "c2ltdWxhdG9yLXNlY3JldC1mb3ItdGVzdHMtb25seSE="


def sim(**directives: object) -> dict[str, str]:
    return {"x-jobgate-sim": orjson.dumps(directives).decode()}


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    """Lifecycles follow the fake clock: a test moves time instead of sleeping."""
    async with Simulator(clock=clock) as sim:
        yield sim


@pytest.fixture
async def oai(simulator: Simulator) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=simulator.openai_base_url,
        api_key="sk-test",
        max_retries=0,
        _strict_response_validation=True,
    ) as client:
        yield client


@pytest.fixture
async def claude(simulator: Simulator) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=simulator.anthropic_base_url,
        api_key="sk-ant-test",
        max_retries=0,
        _strict_response_validation=True,
    ) as client:
        yield client


async def raw(simulator: Simulator, method: str, path: str, **kwargs: object) -> httpx.Response:
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        return await client.request(method, path, **kwargs)  # type: ignore[arg-type]


async def test_chat_completion(simulator: Simulator, oai: openai.AsyncOpenAI) -> None:
    client = oai
    completion = await client.chat.completions.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": "hello there"}]
    )
    assert "hello there" in (completion.choices[0].message.content or "")
    answer = await raw(
        simulator,
        "POST",
        "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    )
    openai_strict(ChatCompletion, answer.json())


async def test_responses_background_lifecycle(
    simulator: Simulator, oai: openai.AsyncOpenAI, clock: FakeClock
) -> None:
    client = oai
    created = await client.responses.create(
        model="gpt-4.1", input="slow one", background=True, extra_headers=sim(latency_s=0.2)
    )
    assert created.status == "queued" and created.background is True
    body = (await raw(simulator, "GET", f"/v1/responses/{created.id}")).json()
    assert body["status"] == "queued"
    openai_strict(Response, body)
    clock.advance(0.1)
    body = (await raw(simulator, "GET", f"/v1/responses/{created.id}")).json()
    assert body["status"] == "in_progress"
    openai_strict(Response, body)
    clock.advance(0.1)
    done = await client.responses.retrieve(created.id)
    assert done.status == "completed" and "slow one" in done.output_text
    assert done.usage is not None and done.usage.output_tokens > 0
    openai_strict(Response, (await raw(simulator, "GET", f"/v1/responses/{created.id}")).json())
    # Cancelling a finished response is refused, as OpenAI refuses it: 400, an error body the
    # SDK types, and the request id the SDK exposes.
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.cancel(created.id)
    assert "Cannot cancel a completed response" in refused.value.message
    assert refused.value.request_id is not None
    openai_strict(ErrorObject, refused.value.response.json()["error"])


@pytest.mark.parametrize("outcome", ["failed", "incomplete"])
async def test_responses_terminal_outcomes(
    simulator: Simulator, oai: openai.AsyncOpenAI, outcome: str, clock: FakeClock
) -> None:
    client = oai
    created = await client.responses.create(
        model="gpt-4.1", input="x", background=True, extra_headers=sim(outcome=outcome)
    )
    clock.advance(0.01)
    body = (await raw(simulator, "GET", f"/v1/responses/{created.id}")).json()
    assert body["status"] == outcome
    openai_strict(Response, body)


async def test_responses_cancel_and_sync(simulator: Simulator, oai: openai.AsyncOpenAI) -> None:
    client = oai
    created = await client.responses.create(
        model="gpt-4.1", input="x", background=True, extra_headers=sim(latency_s=30)
    )
    cancelled = await client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    openai_strict(
        Response, (await raw(simulator, "POST", f"/v1/responses/{created.id}/cancel")).json()
    )
    answered = await client.responses.create(model="gpt-4.1", input="right away")
    assert answered.status == "completed" and "right away" in answered.output_text


async def test_openai_error_bodies(simulator: Simulator, oai: openai.AsyncOpenAI) -> None:
    client = oai
    messages: list[dict[str, str]] = [{"role": "user", "content": "x"}]
    with pytest.raises(openai.RateLimitError) as limited:
        await client.chat.completions.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            extra_headers=sim(fail_with="rate_limit", retry_after_s=0.25),
        )
    headers = limited.value.response.headers
    assert headers["x-ratelimit-reset-requests"] == "250ms"  # OpenAI's duration format
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert "retry-after-ms" not in headers  # realistic: OpenAI's 429s carry the reset headers
    with pytest.raises(openai.RateLimitError) as quota:
        await client.chat.completions.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            extra_headers=sim(fail_with="quota"),
        )
    assert quota.value.code == "insufficient_quota"
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            extra_headers=sim(fail_with="invalid_request"),
        )
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(
            model="m",
            messages=messages,  # type: ignore[arg-type]
            extra_headers=sim(fail_with="server_error"),
        )
    for fault in ("rate_limit", "quota", "server_error", "overloaded", "invalid_request"):
        answer = await raw(
            simulator,
            "POST",
            "/v1/chat/completions",
            json={"model": "m", "messages": messages, "sim": {"fail_with": fault}},
        )
        assert answer.status_code >= 400
        openai_strict(ErrorObject, answer.json()["error"])


async def test_anthropic_message_and_stream(
    simulator: Simulator, claude: anthropic.AsyncAnthropic
) -> None:
    client = claude
    message = await client.messages.create(
        model="claude-sim-large", max_tokens=64, messages=[{"role": "user", "content": "hey"}]
    )
    assert message.content[0].type == "text" and "hey" in message.content[0].text
    body = {
        "model": "claude-sim-large",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "streaming please"}],
    }
    headers = {"anthropic-version": "2023-06-01"}
    plain = await raw(simulator, "POST", "/v1/messages", json=body, headers=headers)
    anthropic_strict(Message, plain.json())
    async with client.messages.stream(**body) as stream:  # type: ignore[arg-type]
        final = await stream.get_final_message()
    assert final.content[0].type == "text" and "streaming please" in final.content[0].text
    streamed = await raw(
        simulator, "POST", "/v1/messages", json={**body, "stream": True}, headers=headers
    )
    events = [
        orjson.loads(line.removeprefix("data: "))
        for line in streamed.text.splitlines()
        if line.startswith("data: ")
    ]
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    for event in events:
        if event["type"] == "ping":
            continue  # documented keep-alive; the SDK skips it, so it has no type to check
        anthropic_strict(RawMessageStreamEvent, event)  # type: ignore[arg-type]


async def test_anthropic_errors(simulator: Simulator, claude: anthropic.AsyncAnthropic) -> None:
    client = claude
    with pytest.raises(anthropic.RateLimitError) as limited:
        await client.messages.create(
            model="c",
            max_tokens=8,
            messages=[{"role": "user", "content": "x"}],
            extra_headers=sim(fail_with="rate_limit"),
        )
    headers = limited.value.response.headers  # realistic: retry-after and the reset time
    assert headers["retry-after"] == "1"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert headers["anthropic-ratelimit-requests-reset"].endswith("Z")
    with pytest.raises(anthropic.InternalServerError) as overloaded:
        await client.messages.create(
            model="c",
            max_tokens=8,
            messages=[{"role": "user", "content": "x"}],
            extra_headers=sim(fail_with="overloaded"),
        )
    assert overloaded.value.status_code == 529
    with pytest.raises(anthropic.RateLimitError) as spend:
        await client.messages.create(
            model="c",
            max_tokens=8,
            messages=[{"role": "user", "content": "x"}],
            extra_headers=sim(fail_with="quota"),
        )
    assert "spend limit" in spend.value.message and spend.value.request_id is not None
    anthropic_strict(ErrorResponse, spend.value.response.json())
    missing_version = await raw(simulator, "POST", "/v1/messages", json={"model": "c"})
    assert missing_version.status_code == 400
    anthropic_strict(ErrorResponse, missing_version.json())


async def test_anthropic_batches(
    simulator: Simulator, claude: anthropic.AsyncAnthropic, clock: FakeClock
) -> None:
    client = claude

    def request(custom_id: str, text: str) -> Any:
        return {
            "custom_id": custom_id,
            "params": {
                "model": "claude-sim-small",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": text}],
            },
        }

    batch = await client.messages.batches.create(
        requests=[request("one", "a"), request("two", "b")], extra_headers=sim(latency_s=0.2)
    )
    assert batch.processing_status == "in_progress"
    headers = {"anthropic-version": "2023-06-01"}
    body = (await raw(simulator, "GET", f"/v1/messages/batches/{batch.id}", headers=headers)).json()
    anthropic_strict(MessageBatch, body)
    clock.advance(0.2)
    ended = await client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended" and ended.request_counts.succeeded == 2
    anthropic_strict(
        MessageBatch,
        (await raw(simulator, "GET", f"/v1/messages/batches/{batch.id}", headers=headers)).json(),
    )
    lines = (
        await raw(simulator, "GET", f"/v1/messages/batches/{batch.id}/results", headers=headers)
    ).text.splitlines()
    results = [anthropic_strict(MessageBatchIndividualResponse, orjson.loads(x)) for x in lines]
    assert sorted(r.custom_id for r in results) == ["one", "two"]
    assert {r.result.type for r in results} == {"succeeded"}

    slow = await client.messages.batches.create(
        requests=[request("x", "c")], extra_headers=sim(latency_s=30)
    )
    canceling = await client.messages.batches.cancel(slow.id)
    assert canceling.processing_status == "canceling"
    anthropic_strict(
        MessageBatch,
        (await raw(simulator, "GET", f"/v1/messages/batches/{slow.id}", headers=headers)).json(),
    )
    clock.advance(0.1)
    ended = await client.messages.batches.retrieve(slow.id)
    assert ended.processing_status == "ended" and ended.request_counts.canceled == 1
    async for item in await client.messages.batches.results(slow.id):
        assert item.result.type == "canceled"
    # Realistic: an ended batch cannot be canceled (a typed 400); requests that never run
    # expire after 24 hours; a rejected request errors with invalid_request_error.
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.batches.cancel(batch.id)  # ended, never cancel-initiated
    anthropic_strict(ErrorResponse, refused.value.response.json())
    odd = await client.messages.batches.create(
        requests=[request("late", "d"), request("bad", "e")], extra_headers=sim(outcome="never")
    )
    clock.advance(86_401)
    expired = await client.messages.batches.retrieve(odd.id)
    assert expired.processing_status == "ended" and expired.request_counts.expired == 2
    rejected = await client.messages.batches.create(
        requests=[request("bad", "e")], extra_headers=sim(outcome="rejected")
    )
    clock.advance(1)
    for done_id, kind in ((odd.id, "expired"), (rejected.id, "errored")):
        lines = (
            await raw(simulator, "GET", f"/v1/messages/batches/{done_id}/results", headers=headers)
        ).text.splitlines()
        for line in lines:
            item = anthropic_strict(MessageBatchIndividualResponse, orjson.loads(line))
            assert item.result.type == kind


async def test_webhooks_are_signed_openai_events(
    simulator: Simulator, oai: openai.AsyncOpenAI
) -> None:
    received: list[tuple[bytes, dict[str, str]]] = []

    async def handler(request: Request) -> Reply:
        received.append((request.body, request.headers))
        return Reply(200)

    receiver = H11Server(handler)
    await receiver.start()
    try:
        simulator.webhook_url = f"http://127.0.0.1:{receiver.port}/hook"
        simulator.webhook_secret = SECRET
        created = await oai.responses.create(
            model="gpt-4.1", input="x", background=True, extra_headers=sim(webhooks="duplicate")
        )
        for _ in range(200):
            if len(received) >= 2:
                break
            await asyncio.sleep(0.05)
    finally:
        await receiver.close()
    assert len(received) == 2
    verifier = openai.OpenAI(api_key="x", webhook_secret=SECRET)
    for body, headers in received:
        # The SDK's verifier checks the window against the real clock; the fake one starts
        # at the real time, so it agrees.
        event = verifier.webhooks.unwrap(body, headers)
        assert event.type == "response.completed" and event.data.id == created.id
        openai_strict(UnwrapWebhookEvent, orjson.loads(body))  # type: ignore[arg-type]
        standard_webhooks.verify(SECRET, headers, body, now_s=int(headers["webhook-timestamp"]))
    assert received[0][1]["webhook-id"] == received[1][1]["webhook-id"]
    verifier.close()
