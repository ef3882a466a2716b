"""/v1/responses through the official `openai` SDK in strict mode (`_strict_response_validation`)
against a real jobgate HTTP server (the `api` fixture, with a worker and the webhook dispatcher
in the same loop), on both backends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import openai
import orjson
import pytest
from openai.types.responses import Response

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain import responses
from jobgate.providers.base import ProviderCall, ProviderResult
from jobgate.providers.streaming import DeltaSink
from jobgate.testing import Block, Fail, ScriptedProvider, Succeed
from jobgate.testing.receiver import WebhookReceiver
from jobgate.testing.waiting import eventually
from tests.api_server import Api

pytestmark = pytest.mark.asyncio


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
        webhook_retry_profile="short",
    )


class Gateway:
    def __init__(self, api: Api, key: str) -> None:
        self.api = api
        self.key = key
        self.headers = {"Authorization": f"Bearer {key}"}
        self.client = self.sdk()

    def sdk(self, **options: Any) -> openai.AsyncOpenAI:
        settings: dict[str, Any] = {"api_key": self.key, "max_retries": 0, **options}
        return openai.AsyncOpenAI(
            base_url=f"{self.api.url}/v1", _strict_response_validation=True, **settings
        )

    async def until(self, response_id: str, *statuses: str, timeout_s: float = 30) -> Response:
        """Retrieve until one of `statuses`, long-polling (`wait` answers when the status
        changes from what it is when the poll arrives: short, so that a change between two
        polls costs little)."""
        async with asyncio.timeout(timeout_s):
            response = await self.client.responses.retrieve(response_id)
            while response.status not in statuses:
                response = await self.client.responses.retrieve(
                    response_id, extra_query={"wait": 1}
                )
            return response

    async def job(self, job_id: str) -> dict[str, Any]:
        answer = await self.api.http.get(f"/v1/jobs/{job_id}", headers=self.headers)
        assert answer.status_code == 200, answer.text
        return answer.json()  # type: ignore[no-any-return]


@pytest.fixture
async def gateway(api: Api) -> AsyncIterator[Gateway]:
    runtime = api.runtime
    worker = runtime.worker()
    dispatcher = runtime.dispatcher()
    tasks = [asyncio.create_task(worker.run()), asyncio.create_task(dispatcher.run())]
    gateway = Gateway(api, await api.key("acme"))
    try:
        yield gateway
    finally:
        await gateway.client.close()
        worker.request_stop()
        dispatcher.request_stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        await dispatcher.aclose()


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as running:
        yield running


# -- create and retrieve ----------------------------------------------------------------------


async def test_background_create_then_retrieve_until_completed(gateway: Gateway) -> None:
    raw = await gateway.client.responses.with_raw_response.create(
        model="sim-echo", input="hello background", background=True, metadata={"team": "a"}
    )
    created = raw.parse()
    assert raw.status_code == 200
    assert raw.headers["location"] == f"/v1/responses/{created.id}"
    assert int(raw.headers["retry-after"]) >= 1
    assert created.id.startswith("resp_") and created.status == "queued"
    assert created.background is True and created.output == [] and created.usage is None
    done = await gateway.until(created.id, "completed")
    assert done.output_text == "echo: hello background"
    assert done.metadata == {"team": "a"} and done.completed_at is not None
    assert done.usage is not None and done.usage.total_tokens == (
        done.usage.input_tokens + done.usage.output_tokens
    )
    assert done.usage.input_tokens_details.cached_tokens == 0
    assert done.usage.output_tokens_details.reasoning_tokens == 0
    job = await gateway.job(created.id)  # the same job on the native surface
    assert job["status"] == "succeeded" and job["endpoint"] == "/v1/responses"
    assert job["metadata"] == {"team": "a"}
    assert job["usage"]["input_tokens"] == done.usage.input_tokens


async def test_reads_of_a_response_leave_its_prompt_behind(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retrieve, its long poll, its stream and cancel read the job without its `input` (a
    large prompt is neither sent by the database nor decoded per poll: storage tests), and
    answer exactly what the whole job renders."""
    tools: Any = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    done = await gateway.client.responses.create(
        model="sim-echo",
        input="a long prompt " * 5_000,
        instructions="be brief",
        tools=tools,
        max_output_tokens=99,
    )
    assert done.status == "completed"
    storage = gateway.api.runtime.storage
    whole = await storage.job_get(job_id=done.id)
    assert whole is not None
    whole_reads: list[dict[str, Any]] = []
    read_whole = storage.job_get

    async def counted(**kwargs: Any) -> Any:
        whole_reads.append(kwargs)
        return await read_whole(**kwargs)

    monkeypatch.setattr(storage, "job_get", counted)
    client = gateway.client
    read = await client.responses.retrieve(done.id)
    polled = await client.responses.retrieve(done.id, extra_query={"wait": 1})
    cancelled = await client.responses.cancel(done.id)
    streamed = [event async for event in await client.responses.retrieve(done.id, stream=True)]
    assert whole_reads == []
    rendered = responses.render(whole)
    for answer in (read, polled, cancelled, done):
        assert answer.model_dump(mode="json", exclude_unset=True) == rendered
    assert streamed[-1].type == "response.completed"
    assert streamed[-1].response.model_dump() == done.model_dump()
    assert done.instructions == "be brief" and done.max_output_tokens == 99
    assert [tool.name for tool in done.tools] == ["f"]  # type: ignore[union-attr]


async def test_synchronous_create_answers_the_finished_response(gateway: Gateway) -> None:
    response = await gateway.client.responses.create(
        model="sim-echo",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "right now"}]}],
        instructions="be brief",
    )
    assert response.status == "completed" and response.background is False
    assert response.output_text == "echo: right now" and response.instructions == "be brief"


async def test_provider_slash_model_routes_and_failures_validate(
    gateway: Gateway, scripted: ScriptedProvider
) -> None:
    scripted.script.append(
        Fail(errors.ProviderFatal("the model refused", code="invalid_value", status_code=400))
    )
    created = await gateway.client.responses.create(
        model="scripted/any-model", input="x", background=True
    )
    failed = await gateway.until(created.id, "failed")
    assert failed.status == "failed" and failed.model == "any-model"
    assert failed.error is not None
    assert failed.error.code == "invalid_prompt" and failed.error.type == "invalid_value"
    assert failed.error.message == "the model refused"
    assert scripted.calls[0].model == "any-model"
    assert scripted.calls[0].body == {"model": "any-model", "input": "x"}  # no `background`


# -- a synchronous create that fails answers OpenAI's HTTP error ------------------------------


FAILURES = [
    (Fail(errors.ProviderFatal("the model refused", code="invalid_value", status_code=400)),
     openai.BadRequestError, 400, "invalid_request_error", "invalid_prompt"),
    (Fail(errors.ProviderQuotaExceeded("no credit", code="insufficient_quota", status_code=429)),
     openai.RateLimitError, 429, "insufficient_quota", "insufficient_quota"),
    (Fail(errors.ProviderOutcomeUnknown("the connection broke after the request")),
     openai.InternalServerError, 500, "server_error", "server_error"),
]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("step", "raised", "status", "kind", "code"), FAILURES)
async def test_a_failing_synchronous_create_raises_in_the_sdk(
    gateway: Gateway,
    scripted: ScriptedProvider,
    step: Fail,
    raised: type[openai.APIStatusError],
    status: int,
    kind: str,
    code: str,
    stream: bool,
) -> None:
    """Without `background` a create that fails (for good, every attempt spent) answers the
    HTTP error OpenAI would, so the SDK raises instead of handing back a hollow `failed`
    Response; a stream that fails before its first output event does the same. The failed
    response stays retrievable at the `Location` the error names."""
    scripted.script.append(step)
    with pytest.raises(raised) as failed:
        answer = await gateway.client.responses.create(model="scripted/m", input="x", stream=stream)
        if stream:  # an SSE answer would raise nothing: read it to the end
            async for _event in answer:  # type: ignore[union-attr]
                pass
    error = failed.value
    assert error.status_code == status
    assert isinstance(error.body, dict) and error.body["type"] == kind and error.code == code
    assert error.body["message"] == step.error.message
    location = error.response.headers["location"]
    kept = await gateway.client.responses.retrieve(location.rsplit("/", 1)[-1])
    assert kept.status == "failed" and kept.error is not None


async def test_a_stream_that_fails_after_its_output_began_ends_with_response_failed(
    gateway: Gateway, scripted: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once output has streamed the answer is under way (200): a failure is its
    `response.failed` event, as OpenAI streams one."""

    storage = gateway.api.runtime.storage

    async def stream(call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
        await on_delta("partial ")

        async def stored() -> bool:
            return bool(await storage.job_output_read(job_id=call.job_id, after_seq=0))

        await eventually(stored, what="the first delta stored")  # readers have seen output
        raise errors.ProviderFatal("cut off", code="invalid_value", status_code=400)

    monkeypatch.setattr(scripted, "streams", lambda endpoint: True, raising=False)
    monkeypatch.setattr(scripted, "stream", stream, raising=False)
    answer = await gateway.client.responses.create(model="scripted/m", input="x", stream=True)
    events = [event async for event in answer]
    types = [event.type for event in events]
    assert "response.output_text.delta" in types and types[-1] == "response.failed"
    assert events[-1].response.error is not None  # type: ignore[union-attr]


# -- cancel and delete ------------------------------------------------------------------------


async def test_cancel_while_running_then_again(
    gateway: Gateway, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    created = await gateway.client.responses.create(
        model="scripted/slow", input="take your time", background=True
    )
    running = await gateway.until(created.id, "in_progress")
    assert running.output == []
    await asyncio.wait_for(block.started.wait(), 10)
    cancelled = await gateway.client.responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.error is None
    assert block.cancelled  # the provider call was aborted, not left running
    again = await gateway.client.responses.cancel(created.id)
    assert again.model_dump() == cancelled.model_dump()
    job = await gateway.job(created.id)
    assert job["status"] == "cancelled" and job["cancel_outcome"] == "interrupted"


async def test_cancelling_a_finished_response_returns_it_unchanged(gateway: Gateway) -> None:
    done = await gateway.client.responses.create(model="sim-echo", input="finished")
    assert done.status == "completed"
    answer = await gateway.client.responses.with_raw_response.cancel(done.id)
    assert answer.status_code == 200
    assert answer.parse().model_dump() == done.model_dump()


async def test_delete_purges_and_then_it_is_gone(gateway: Gateway) -> None:
    done = await gateway.client.responses.create(model="sim-echo", input="forget me")
    raw = await gateway.api.http.delete(f"/v1/responses/{done.id}", headers=gateway.headers)
    assert raw.json() == {"id": done.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        await gateway.client.responses.retrieve(done.id)
    with pytest.raises(openai.NotFoundError):
        await gateway.client.responses.delete(done.id)
    job = await gateway.job(done.id)
    assert job["purged"] is True and job["result"] is None


async def test_replaying_the_create_of_a_deleted_response_finds_nothing(gateway: Gateway) -> None:
    # Found by schemathesis' stateful phase (seed 99): the replay answered a hollow 200 for a
    # response that retrieve and delete call not found.
    key = {"Idempotency-Key": "deleted-then-replayed"}
    done = await gateway.client.responses.create(
        model="sim-echo", input="forget me", extra_headers=key
    )
    await gateway.client.responses.delete(done.id)
    with pytest.raises(openai.NotFoundError):
        await gateway.client.responses.create(
            model="sim-echo", input="forget me", extra_headers=key
        )
    with pytest.raises(openai.UnprocessableEntityError):  # the key still belongs to that body
        await gateway.client.responses.create(model="sim-echo", input="another", extra_headers=key)


async def test_not_found_for_jobs_and_other_tenants(gateway: Gateway) -> None:
    native = await gateway.api.http.post(
        "/v1/jobs",
        headers=gateway.headers,
        json={"endpoint": "/v1/responses", "body": {"model": "sim-echo", "input": "x"}},
    )
    with pytest.raises(openai.NotFoundError):
        await gateway.client.responses.retrieve(native.json()["id"])
    mine = await gateway.client.responses.create(model="sim-echo", input="mine", background=True)
    other = gateway.sdk(api_key=await gateway.api.key("other"))
    for attempt in (
        other.responses.retrieve(mine.id),
        other.responses.cancel(mine.id),
        other.responses.delete(mine.id),
    ):
        with pytest.raises(openai.NotFoundError):
            await attempt
    await other.close()


# -- idempotency ------------------------------------------------------------------------------


async def test_idempotency_key_replays_and_refuses_a_different_body(gateway: Gateway) -> None:
    key = {"Idempotency-Key": "order-42"}
    first = await gateway.client.responses.with_raw_response.create(
        model="sim-echo", input="once", background=True, extra_headers=key
    )
    second = await gateway.client.responses.with_raw_response.create(
        model="sim-echo", input="once", background=True, extra_headers=key
    )
    assert first.parse().id == second.parse().id
    assert second.headers["idempotent-replayed"] == "true"
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        await gateway.client.responses.create(
            model="sim-echo", input="twice", background=True, extra_headers=key
        )
    assert refused.value.code == "idempotency_key_reused"
    # The key belongs to /v1/responses: the same key on /v1/jobs is another request.
    native = await gateway.api.http.post(
        "/v1/jobs",
        headers={**gateway.headers, **key},
        json={"endpoint": "/v1/responses", "body": {"model": "sim-echo", "input": "x"}},
    )
    assert native.status_code == 202


class LoseFirstAnswer(httpx2.AsyncBaseTransport):
    """Deliver the first create to the server, then lose its answer (a network fault)."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.sent: list[httpx2.Request] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST":
            self.sent.append(request)
            if len(self.sent) == 1:
                await response.aread()
                await response.aclose()
                raise httpx2.ReadError("connection reset after the request was sent")
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def response_count(gateway: Gateway) -> int:
    listed = await gateway.api.http.get("/v1/jobs", headers=gateway.headers)
    return len(listed.json()["data"])


@pytest.mark.parametrize("how", ["none", "extra_headers", "sdk_header"])
async def test_sdk_retry_after_a_lost_answer(gateway: Gateway, how: str) -> None:
    """The SDK retries a POST whose answer was lost. Without an Idempotency-Key the retry is a
    second response (and a second bill); with one (docs/responses.md) it is the same."""
    transport = LoseFirstAnswer()
    client = gateway.sdk(
        max_retries=2, http_client=openai.DefaultAsyncHttpxClient(transport=transport)
    )
    if how == "sdk_header":
        client._idempotency_header = "Idempotency-Key"
    headers = {"Idempotency-Key": "retry-me"} if how == "extra_headers" else None
    async with client:
        created = await client.responses.create(
            model="sim-echo", input="retried", background=True, extra_headers=headers
        )
    assert len(transport.sent) == 2
    keys = {request.headers.get("idempotency-key") for request in transport.sent}
    if how == "none":
        assert keys == {None}
        assert await response_count(gateway) == 2
    else:
        assert len(keys) == 1 and None not in keys
        assert await response_count(gateway) == 1
        assert (await gateway.job(created.id))["id"] == created.id


# -- long polls and streams -------------------------------------------------------------------


async def test_wait_long_polls_until_the_status_changes(
    gateway: Gateway, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    created = await gateway.client.responses.create(model="scripted/m", input="x", background=True)
    await gateway.until(created.id, "in_progress")
    poll = asyncio.create_task(
        gateway.client.responses.retrieve(created.id, extra_query={"wait": 30})
    )
    await asyncio.sleep(0.2)
    assert not poll.done()
    block.release.set()
    finished = await asyncio.wait_for(poll, 20)
    assert finished.status == "completed"


async def test_stream_retrieve_resumes_after_starting_after(gateway: Gateway) -> None:
    done = await gateway.client.responses.create(model="sim-echo", input="stream me")
    stream = await gateway.client.responses.retrieve(done.id, stream=True)
    everything = [event async for event in stream]
    numbers = [event.sequence_number for event in everything]
    assert numbers == list(range(len(everything)))
    assert everything[0].type == "response.created"
    assert everything[-1].type == "response.completed"
    assert everything[-1].response.output_text == "echo: stream me"
    deltas = [e.delta for e in everything if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "echo: stream me"
    resumed = await gateway.client.responses.retrieve(done.id, stream=True, starting_after=4)
    tail = [event async for event in resumed]
    assert [e.model_dump() for e in tail] == [e.model_dump() for e in everything[5:]]
    by_header = await gateway.api.http.get(
        f"/v1/responses/{done.id}",
        params={"stream": "true"},
        headers={**gateway.headers, "Last-Event-ID": str(numbers[-2])},
    )
    assert by_header.headers["content-type"].startswith("text/event-stream")
    assert by_header.text.count("data: ") == 1 and "response.completed" in by_header.text


async def test_stream_follows_a_live_response_to_its_end(
    gateway: Gateway, scripted: ScriptedProvider
) -> None:
    block = Block(then=Succeed(body={"status": "completed", "output": [], "usage": None}))
    scripted.script.append(block)
    created = await gateway.client.responses.create(model="scripted/m", input="x", background=True)
    stream = await gateway.client.responses.retrieve(created.id, stream=True)
    seen: list[str] = []
    async for event in stream:
        seen.append(event.type)
        if event.type == "response.in_progress":
            block.release.set()
    assert seen[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert seen[-1] == "response.completed"


async def test_create_with_stream(gateway: Gateway) -> None:
    stream = await gateway.client.responses.create(
        model="sim-echo", input="streamed create", stream=True
    )
    events = [event async for event in stream]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "echo: streamed create"


async def test_a_streamed_create_streams_text_then_a_tool_call(gateway: Gateway) -> None:
    """Every output item streams (the call with its arguments events) under the id and
    output_index the finished Response holds; without `background` the stream opens
    `in_progress`, with no `response.queued`. The SDK's own accumulator agrees."""
    tools: Any = [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]
    async with gateway.client.responses.stream(
        model="sim-echo",
        input="look it up",
        tools=tools,
        extra_body={"sim": {"tool_calls": 1, "chunks": 3}},
    ) as stream:
        events = [event async for event in stream]
        accumulated = await stream.get_final_response()
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert events[0].response.status == "in_progress"  # type: ignore[union-attr]
    assert "response.queued" not in types and types[-1] == "response.completed"
    final = events[-1].response  # type: ignore[union-attr]
    held = [(index, item.id) for index, item in enumerate(final.output)]
    assert [item.type for item in final.output] == ["message", "function_call"]
    for kind in ("response.output_item.added", "response.output_item.done"):
        seen = [(e.output_index, e.item.id) for e in events if e.type == kind]
        assert seen == held, kind
    [arguments] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert (arguments.output_index, arguments.item_id) == held[1]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == final.output_text == "echo: look it up"
    assert accumulated.model_dump()["output"] == final.model_dump()["output"]
    retrieved = await gateway.client.responses.retrieve(final.id)
    assert [(item.id, item.type) for item in retrieved.output] == [
        (item.id, item.type) for item in final.output
    ]


async def test_stream_of_a_cancelled_response_ends_with_an_error_event(
    gateway: Gateway, scripted: ScriptedProvider
) -> None:
    scripted.script.append(Block())
    created = await gateway.client.responses.create(model="scripted/m", input="x", background=True)
    await gateway.until(created.id, "in_progress")
    await gateway.client.responses.cancel(created.id)
    events = [e async for e in await gateway.client.responses.retrieve(created.id, stream=True)]
    assert events[-1].type == "error" and events[-1].code == "response_cancelled"


# -- a client that goes away ------------------------------------------------------------------


async def cancel_actors(gateway: Gateway, job_id: str) -> list[str]:
    answer = await gateway.api.http.get(f"/v1/jobs/{job_id}/events", headers=gateway.headers)
    return [event["actor"] for event in answer.json()["data"]]


async def test_synchronous_create_is_cancelled_when_the_client_disconnects(
    gateway: Gateway, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    with pytest.raises(httpx.ReadTimeout):
        await gateway.api.http.post(
            "/v1/responses",
            headers=gateway.headers,
            json={"model": "scripted/m", "input": "I will not wait"},
            timeout=httpx.Timeout(30, read=1.0),
        )
    listed = await gateway.api.http.get("/v1/jobs", headers=gateway.headers)
    [job] = listed.json()["data"]
    cancelled = await gateway.until(job["id"], "cancelled")
    assert cancelled.status == "cancelled"
    assert block.cancelled
    assert "api:disconnect" in await cancel_actors(gateway, job["id"])


async def test_a_streamed_create_is_cancelled_when_the_client_leaves(
    gateway: Gateway, scripted: ScriptedProvider
) -> None:
    """A synchronous stream is answered once its output begins: a client that leaves before
    (here while the provider call is under way) cancels the response."""
    block = Block()
    scripted.script.append(block)
    leaving = asyncio.create_task(
        gateway.api.http.post(
            "/v1/responses",
            json={"model": "scripted/m", "input": "stream it", "stream": True},
            headers=gateway.headers,
        )
    )
    # Leave only once the provider call is under way, so the cancel has a call to interrupt.
    await asyncio.wait_for(block.started.wait(), timeout=10)
    leaving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await leaving
    listed = await gateway.api.http.get("/v1/jobs", headers=gateway.headers)
    [job] = listed.json()["data"]
    response_id = job["id"]
    cancelled = await gateway.until(response_id, "cancelled")
    assert cancelled.status == "cancelled"
    assert block.cancelled
    job = await gateway.job(response_id)
    assert job["cancel_outcome"] == "interrupted"
    assert "api:disconnect" in await cancel_actors(gateway, response_id)


async def test_a_stream_left_after_its_output_began_is_cancelled(
    gateway: Gateway, scripted: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupted = asyncio.Event()

    async def stream(call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
        await on_delta("the start ")
        try:
            await asyncio.Event().wait()  # the rest never comes
        finally:
            interrupted.set()
        raise AssertionError("unreachable")

    monkeypatch.setattr(scripted, "streams", lambda endpoint: True, raising=False)
    monkeypatch.setattr(scripted, "stream", stream, raising=False)
    async with gateway.api.http.stream(
        "POST",
        "/v1/responses",
        json={"model": "scripted/m", "input": "stream it", "stream": True},
        headers=gateway.headers,
    ) as answer:
        assert answer.status_code == 200
        response_id = answer.headers["location"].rsplit("/", 1)[-1]
        async for line in answer.aiter_lines():
            if "response.output_text.delta" in line:
                break
    await gateway.until(response_id, "cancelled")
    await asyncio.wait_for(interrupted.wait(), 10)
    assert "api:disconnect" in await cancel_actors(gateway, response_id)


async def test_a_background_stream_is_not_cancelled_when_the_client_leaves(
    gateway: Gateway, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    created = await gateway.client.responses.create(model="scripted/m", input="x", background=True)
    async with gateway.api.http.stream(
        "GET", f"/v1/responses/{created.id}", params={"stream": "true"}, headers=gateway.headers
    ) as stream:
        async for line in stream.aiter_lines():
            if "response.in_progress" in line:
                break
    await asyncio.sleep(0.3)
    assert (await gateway.job(created.id))["status"] == "running"
    block.release.set()
    await gateway.until(created.id, "completed")


# -- requests jobgate refuses -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"previous_response_id": "resp_x"}, "previous_response_id"),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "0.5"}, "temperature"),
        ({"input": ""}, "input"),
        ({"model": ""}, "model"),
        ({"tools": [{"type": "teleport"}]}, "tools[0].type"),
        ({"background": True, "store": False}, "store"),
        ({"webhook": {"url": "ftp://x"}}, "webhook.url"),
    ],
)
async def test_invalid_requests_are_refused_with_the_param(
    gateway: Gateway, fields: dict[str, Any], param: str
) -> None:
    body = {"model": "sim-echo", "input": "x", **fields}
    with pytest.raises(openai.BadRequestError) as refused:
        await gateway.client.post("/responses", body=body, cast_to=Response)
    assert refused.value.param == param, refused.value.body
    assert await response_count(gateway) == 0


# -- webhooks ---------------------------------------------------------------------------------


async def test_webhook_unwraps_as_a_response_completed_event(
    gateway: Gateway, receiver: WebhookReceiver
) -> None:
    endpoint = await gateway.api.http.post(
        "/v1/webhook_endpoints",
        headers=gateway.headers,
        json={"url": receiver.url, "event_types": ["response.completed"], "include_result": True},
    )
    secret = endpoint.json()["secret"]
    done = await gateway.client.responses.create(model="sim-echo", input="tell me later")
    assert await asyncio.to_thread(receiver.wait_for, 1)
    delivery = receiver.received[0]
    verifier = openai.OpenAI(api_key="unused", webhook_secret=secret)
    event = verifier.webhooks.unwrap(delivery.body, delivery.headers)
    assert event.type == "response.completed"
    assert event.data.id == done.id and event.id.startswith("evt_")
    assert event.object == "event"
    # The endpoint asked for results: the whole Response rides along and validates.
    extra = event.data.model_extra or {}
    assert Response.model_validate(extra["response"]).output_text == "echo: tell me later"
    with pytest.raises(openai.InvalidWebhookSignatureError):
        verifier.webhooks.unwrap(delivery.body + b" ", delivery.headers)


async def test_per_response_webhook_is_thin_and_signed_with_the_tenant_secret(
    gateway: Gateway, receiver: WebhookReceiver
) -> None:
    secret = (await gateway.api.http.get("/v1/webhook_secret", headers=gateway.headers)).json()
    done = await gateway.client.responses.create(
        model="sim-echo", input="x", extra_body={"webhook": {"url": receiver.url}}
    )
    assert await asyncio.to_thread(receiver.wait_for, 1)
    delivery = receiver.received[0]
    verifier = openai.OpenAI(api_key="unused", webhook_secret=secret["secret"])
    event = verifier.webhooks.unwrap(delivery.body, delivery.headers)
    assert event.type == "response.completed" and event.data.id == done.id
    assert not event.model_extra and not event.data.model_extra  # OpenAI's thin shape


async def test_cancelled_and_failed_responses_send_their_events(
    gateway: Gateway, scripted: ScriptedProvider, receiver: WebhookReceiver
) -> None:
    await gateway.api.http.post(
        "/v1/webhook_endpoints", headers=gateway.headers, json={"url": receiver.url}
    )
    scripted.script.extend([Block(), Fail(errors.ProviderFatal("no", status_code=400))])
    slow = await gateway.client.responses.create(model="scripted/m", input="x", background=True)
    await gateway.until(slow.id, "in_progress")
    await gateway.client.responses.cancel(slow.id)
    with pytest.raises(openai.BadRequestError):
        await gateway.client.responses.create(model="scripted/m", input="y")
    assert await asyncio.to_thread(receiver.wait_for, 2)
    types = sorted(orjson.loads(request.body)["type"] for request in receiver.received)
    assert types == ["response.cancelled", "response.failed"]
