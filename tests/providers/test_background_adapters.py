"""Background mode in the adapters, against the simulator over real HTTP (its lifecycles on a
fake clock): OpenAI Responses with `background: true` and Anthropic Message Batches — create,
retrieve, results, cancel — with every request checked against the SDKs' request types."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from anthropic.types import message_create_params
from anthropic.types.messages import batch_create_params
from openai.types.responses import response_create_params

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers.anthropic import BATCHES, AnthropicProvider, batch_snapshot
from jobgate.providers.background import ProviderJobRef, Status, background_for
from jobgate.providers.base import ProviderCall
from jobgate.providers.openai import RESPONSES, OpenAIProvider
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock
from jobgate.wire import anthropic_requests
from tests.providers.sdk import request_matches


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock) as sim:
        yield sim


@pytest.fixture
async def openai_bg(simulator: Simulator) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(
        "upstream",
        ProviderConfig(kind="openai", base_url=simulator.openai_base_url, mode="background"),
    )
    yield provider
    await provider.aclose()


@pytest.fixture
async def batches(simulator: Simulator) -> AsyncIterator[AnthropicProvider]:
    provider = AnthropicProvider(
        "claude", ProviderConfig(kind="anthropic", base_url=simulator.anthropic_base_url)
    )
    yield provider
    await provider.aclose()


def call(endpoint: str, body: dict[str, Any], job_id: str = "job_bg") -> ProviderCall:
    return ProviderCall(job_id, "ten_1", endpoint, body, body.get("model"), 1, 1, job_id)


def ref(snapshot_id: str, endpoint: str, job_id: str = "job_bg") -> ProviderJobRef:
    return ProviderJobRef(job_id, snapshot_id, endpoint, None)


async def test_openai_background_create_retrieve(
    openai_bg: OpenAIProvider, simulator: Simulator, clock: FakeClock
) -> None:
    assert background_for(openai_bg, RESPONSES) is openai_bg
    body = {"model": "gpt-4.1", "input": "think hard", "metadata": {"team": "a"}}
    openai_bg.validate(RESPONSES, body)
    created = await openai_bg.create(call(RESPONSES, {**body, "sim": {"latency_s": 5}}))
    assert created.status == Status.QUEUED and not created.terminal
    (sent,) = [r for r in simulator.engine.requests if r.path == "/v1/responses"]
    assert sent.body is not None
    request_matches(response_create_params.ResponseCreateParamsNonStreaming, sent.body)
    assert sent.body["background"] is True and sent.body["store"] is True
    assert sent.body["metadata"] == {"team": "a", "jobgate_job_id": "job_bg"}
    assert sent.headers["idempotency-key"] == "job_bg"
    clock.advance(1)
    running = await openai_bg.retrieve(ref(created.provider_job_id, RESPONSES))
    assert running.status == Status.IN_PROGRESS
    clock.advance(5)
    done = await openai_bg.retrieve(ref(created.provider_job_id, RESPONSES))
    assert done.status == Status.COMPLETED and done.result is not None
    assert "think hard" in str(done.result.body["output"])
    assert done.result.usage.output_tokens > 0


async def test_openai_background_outcomes_and_cancel(
    openai_bg: OpenAIProvider, clock: FakeClock
) -> None:
    body = {"model": "gpt-4.1", "input": "x"}
    failed = await openai_bg.create(call(RESPONSES, {**body, "sim": {"outcome": "failed"}}))
    clock.advance(0.1)
    answer = await openai_bg.retrieve(ref(failed.provider_job_id, RESPONSES))
    assert answer.status == Status.FAILED and isinstance(answer.error, errors.ProviderRetryable)

    slow = await openai_bg.create(call(RESPONSES, {**body, "sim": {"latency_s": 60}}, "job_2"))
    cancelled = await openai_bg.cancel(ref(slow.provider_job_id, RESPONSES, "job_2"))
    assert cancelled.status == Status.CANCELLED

    quick = await openai_bg.create(call(RESPONSES, {**body, "sim": {"latency_s": 1}}, "job_3"))
    clock.advance(2)
    too_late = await openai_bg.cancel(ref(quick.provider_job_id, RESPONSES, "job_3"))
    assert too_late.status == Status.COMPLETED and too_late.result is not None

    stuck = await openai_bg.create(
        call(RESPONSES, {**body, "sim": {"latency_s": 60, "cancel": "unsupported"}}, "job_4")
    )
    with pytest.raises(errors.ProviderCancelUnsupported):
        await openai_bg.cancel(ref(stuck.provider_job_id, RESPONSES, "job_4"))


async def test_openai_cancel_of_a_finished_response_is_refused_then_retrieved(
    openai_bg: OpenAIProvider, simulator: Simulator, clock: FakeClock
) -> None:
    """OpenAI answers 400 "Cannot cancel a completed response"; the adapter answers with the
    response as it stands (too late), sending the cancel once."""
    created = await openai_bg.create(call(RESPONSES, {"model": "m", "input": "x"}))
    clock.advance(1)
    answer = await openai_bg.cancel(ref(created.provider_job_id, RESPONSES))
    assert answer.status == Status.COMPLETED and answer.result is not None
    tail = [(r.method, r.path) for r in simulator.engine.requests][-2:]
    assert tail == [
        ("POST", f"/v1/responses/{created.provider_job_id}/cancel"),
        ("GET", f"/v1/responses/{created.provider_job_id}"),
    ]


async def test_openai_retrieve_of_an_unknown_id_is_fatal(openai_bg: OpenAIProvider) -> None:
    with pytest.raises(errors.ProviderFatal) as caught:
        await openai_bg.retrieve(ref("resp_nope", RESPONSES))
    assert caught.value.status_code == 404


async def test_a_status_check_that_gets_no_answer_is_retryable(
    openai_bg: OpenAIProvider, simulator: Simulator
) -> None:
    created = await openai_bg.create(call(RESPONSES, {"model": "m", "input": "x"}))
    simulator.inject("GET", "/v1/responses/", "server_error")
    with pytest.raises(errors.ProviderRetryable):
        await openai_bg.retrieve(ref(created.provider_job_id, RESPONSES))
    assert (await openai_bg.retrieve(ref(created.provider_job_id, RESPONSES))).status


def batch_body(*texts: str, **sim: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "requests": [
            {
                "custom_id": f"req-{index}",
                "params": {
                    "model": "claude-sim",
                    "max_tokens": 32,
                    "messages": [{"role": "user", "content": text}],
                },
            }
            for index, text in enumerate(texts)
        ]
    }
    if sim:
        body["sim"] = sim
    return body


async def test_anthropic_batch_create_poll_results(
    batches: AnthropicProvider, simulator: Simulator, clock: FakeClock
) -> None:
    body = batch_body("one", "two", latency_s=3)
    batches.validate(BATCHES, body)
    assert background_for(batches, BATCHES) is batches
    created = await batches.create(call(BATCHES, body))
    assert created.status == Status.IN_PROGRESS
    (sent,) = [r for r in simulator.engine.requests if r.path == "/v1/messages/batches"]
    assert sent.body is not None
    request_matches(batch_create_params.BatchCreateParams, sent.body)
    for item in sent.body["requests"]:
        request_matches(message_create_params.MessageCreateParamsNonStreaming, item["params"])
    clock.advance(4)
    ended = await batches.retrieve(ref(created.provider_job_id, BATCHES))
    assert ended.status == Status.COMPLETED and ended.needs_result and ended.result is None
    result = await batches.fetch_result(ref(created.provider_job_id, BATCHES), ended)
    assert [r["custom_id"] for r in result.body["results"]] == ["req-0", "req-1"]
    assert result.usage.output_tokens == sum(
        r["result"]["message"]["usage"]["output_tokens"] for r in result.body["results"]
    )


async def test_anthropic_batch_cancel(batches: AnthropicProvider, clock: FakeClock) -> None:
    created = await batches.create(call(BATCHES, batch_body("slow", latency_s=60)))
    canceling = await batches.cancel(ref(created.provider_job_id, BATCHES))
    assert canceling.status == Status.CANCELLING
    clock.advance(1)
    ended = await batches.retrieve(ref(created.provider_job_id, BATCHES))
    assert ended.status == Status.CANCELLED and not ended.needs_result

    rejected = await batches.create(call(BATCHES, batch_body("bad", outcome="rejected"), "job_e"))
    clock.advance(1)
    failed = await batches.retrieve(ref(rejected.provider_job_id, BATCHES, "job_e"))
    assert failed.status == Status.FAILED and isinstance(failed.error, errors.ProviderFatal)


async def test_a_batch_whose_requests_all_failed_with_api_error_is_retryable(
    batches: AnthropicProvider, clock: FakeClock
) -> None:
    """The counts say only `errored`; the results file says `api_error`: a server-side
    failure, retried like the same error on a Messages call (it was fatal)."""
    errored = await batches.create(call(BATCHES, batch_body("a", "b", outcome="failed")))
    clock.advance(1)
    failed = await batches.retrieve(ref(errored.provider_job_id, BATCHES))
    assert failed.status == Status.FAILED
    assert isinstance(failed.error, errors.ProviderRetryable)
    assert failed.error.code == "batch_errored" and "api_error" in failed.error.message


async def test_anthropic_batch_counts_change_only_when_the_batch_ends(
    batches: AnthropicProvider, simulator: Simulator, clock: FakeClock
) -> None:
    body = batch_body("quick", "slow")
    body["requests"][0]["params"]["sim"] = {"latency_s": 1}  # per request: sent raw
    body["requests"][1]["params"]["sim"] = {"latency_s": 10}
    async with httpx.AsyncClient(base_url=simulator.url) as raw:
        answer = await raw.post(
            "/v1/messages/batches", json=body, headers={"anthropic-version": "2023-06-01"}
        )
    created = batch_snapshot(answer.json())
    clock.advance(5)  # the first request is done, the batch is not
    midway = await batches.retrieve(ref(created.provider_job_id, BATCHES))
    assert midway.status == Status.IN_PROGRESS
    assert midway.body["request_counts"]["processing"] == 2
    assert midway.body["request_counts"]["succeeded"] == 0
    clock.advance(6)
    ended = await batches.retrieve(ref(created.provider_job_id, BATCHES))
    assert ended.body["request_counts"]["succeeded"] == 2 and ended.status == Status.COMPLETED


async def test_anthropic_batch_cancel_after_it_ended_is_answered_as_ended(
    batches: AnthropicProvider, simulator: Simulator, clock: FakeClock
) -> None:
    created = await batches.create(call(BATCHES, batch_body("quick", latency_s=1)))
    clock.advance(2)
    answer = await batches.cancel(ref(created.provider_job_id, BATCHES))
    assert answer.status == Status.COMPLETED and answer.needs_result
    cancels = [r for r in simulator.engine.requests if r.path.endswith("/cancel")]
    assert len(cancels) == 1  # refused once (400), then retrieved: never sent again


async def test_anthropic_batch_requests_expire_after_24_hours(
    batches: AnthropicProvider, simulator: Simulator, clock: FakeClock
) -> None:
    body = batch_body("done", "never")
    body["requests"][1]["params"]["sim"] = {"outcome": "never"}
    async with httpx.AsyncClient(base_url=simulator.url) as raw:
        answer = await raw.post(
            "/v1/messages/batches", json=body, headers={"anthropic-version": "2023-06-01"}
        )
    created = batch_snapshot(answer.json())
    clock.advance(3600)
    assert (await batches.retrieve(ref(created.provider_job_id, BATCHES))).status == (
        Status.IN_PROGRESS
    )
    clock.advance(86_400)
    ended = await batches.retrieve(ref(created.provider_job_id, BATCHES))
    assert ended.body["request_counts"]["expired"] == 1
    assert ended.status == Status.COMPLETED and ended.needs_result
    result = await batches.fetch_result(ref(created.provider_job_id, BATCHES), ended)
    assert [r["result"]["type"] for r in result.body["results"]] == ["succeeded", "expired"]

    lost = await batches.create(call(BATCHES, batch_body("x", outcome="never"), "job_x"))
    clock.advance(86_401)
    expired = await batches.retrieve(ref(lost.provider_job_id, BATCHES, "job_x"))
    assert expired.status == Status.FAILED and isinstance(expired.error, errors.ProviderRetryable)
    assert expired.error.code == "batch_expired"


def test_batch_validation() -> None:
    provider = AnthropicProvider("claude", ProviderConfig(kind="anthropic"))
    with pytest.raises(errors.InvalidRequest, match="custom_id"):
        provider.validate(BATCHES, {"requests": [{"custom_id": "bad id!", "params": {}}]})
    duplicate = batch_body("a", "b")
    duplicate["requests"][1]["custom_id"] = "req-0"
    with pytest.raises(errors.InvalidRequest, match="not unique"):
        provider.validate(BATCHES, duplicate)
    streaming = batch_body("a")
    streaming["requests"][0]["params"]["stream"] = True
    with pytest.raises(errors.InvalidRequest, match="stream"):
        provider.validate(BATCHES, streaming)
    assert anthropic_requests.validate_messages({"model": "m", "messages": []}) is not None
