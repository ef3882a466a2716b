"""The simulator's batch APIs, driven by the official SDKs in strict mode with every payload
checked against the SDK types: OpenAI Files + Batch API (lifecycle, request_counts, output and
error files, list by page, cancel, expiry part done, a refused input file, a lost create reply)
and Anthropic Message Batches (expiry part done, a lost create reply, list)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final, Literal

import anthropic
import httpx
import hypothesis
import openai
import orjson
import pytest
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse
from hypothesis import strategies as st
from openai.types import Batch, FileObject
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from openai.types.shared import ErrorObject

from jobgate.simulator.openai_batches import OpenAIBatches, Refused
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock
from jobgate.wire import sim as sim_wire
from tests.providers.sdk import anthropic_strict, openai_strict

CHAT: Final[Literal["/v1/chat/completions"]] = "/v1/chat/completions"


def sim(**directives: object) -> dict[str, str]:
    return {"x-jobgate-sim": orjson.dumps(directives).decode()}


def chat_line(custom_id: str, text: str, **body: Any) -> bytes:
    line = {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT,
        "body": {"model": "gpt-sim", "messages": [{"role": "user", "content": text}], **body},
    }
    return orjson.dumps(line)


def jsonl(*lines: bytes) -> bytes:
    return b"\n".join(lines) + b"\n"


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock) as server:
        yield server


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


async def raw(simulator: Simulator, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=simulator.url) as client:
        return await client.request(method, path, **kwargs)


async def batch_body(simulator: Simulator, batch_id: str) -> Batch:
    """The batch as the simulator answers it, checked strictly (no member outside the type)."""
    answer = await raw(simulator, "GET", f"/v1/batches/{batch_id}")
    assert answer.status_code == 200
    return openai_strict(Batch, answer.json())


async def upload(oai: openai.AsyncOpenAI, data: bytes) -> FileObject:
    stored = await oai.files.create(file=("input.jsonl", data), purpose="batch")
    assert stored.purpose == "batch" and stored.bytes == len(data)
    return stored


async def file_lines(oai: openai.AsyncOpenAI, file_id: str) -> list[dict[str, Any]]:
    content = await oai.files.content(file_id)
    return [orjson.loads(line) for line in content.text.splitlines()]


@pytest.mark.asyncio
async def test_openai_batch_lifecycle(
    simulator: Simulator, oai: openai.AsyncOpenAI, clock: FakeClock
) -> None:
    stored = await upload(oai, jsonl(*(chat_line(f"c{i}", f"hello {i}") for i in range(4))))
    assert openai_strict(FileObject, (await raw(simulator, "GET", f"/v1/files/{stored.id}")).json())
    batch = await oai.batches.create(
        input_file_id=stored.id,
        endpoint=CHAT,
        completion_window="24h",
        metadata={"jobgate_part": "p1"},
        extra_headers=sim(latency_s=10),
    )
    assert batch.status == "validating" and batch.metadata == {"jobgate_part": "p1"}
    assert (await batch_body(simulator, batch.id)).request_counts.total == 0  # type: ignore[union-attr]
    clock.advance(1)  # validated; the four lines finish at 3, 5, 7 and 9 s
    running = await batch_body(simulator, batch.id)
    assert running.status == "in_progress" and running.in_progress_at is not None
    assert running.request_counts is not None and running.request_counts.total == 4
    assert running.request_counts.completed == 0
    clock.advance(4.5)
    halfway = await oai.batches.retrieve(batch.id)
    assert halfway.request_counts is not None and halfway.request_counts.completed == 2
    assert halfway.output_file_id is None  # files exist only once the batch has ended
    clock.advance(4)
    finalizing = await batch_body(simulator, batch.id)
    assert finalizing.status == "finalizing" and finalizing.finalizing_at is not None
    clock.advance(1)
    done = await batch_body(simulator, batch.id)
    assert done.status == "completed" and done.completed_at is not None
    assert done.request_counts is not None and done.request_counts.completed == 4
    assert done.error_file_id is None and done.output_file_id is not None
    assert done.usage is not None and done.usage.total_tokens > 0
    output = openai_strict(
        FileObject, (await raw(simulator, "GET", f"/v1/files/{done.output_file_id}")).json()
    )
    assert output.purpose == "batch_output"
    lines = await file_lines(oai, done.output_file_id)
    assert [line["custom_id"] for line in lines] == ["c0", "c1", "c2", "c3"]
    for line in lines:
        assert line["error"] is None and line["response"]["status_code"] == 200
        completion = openai_strict(ChatCompletion, line["response"]["body"])
        assert completion.choices[0].message.content


@pytest.mark.asyncio
async def test_openai_batch_lists_newest_first_with_metadata(
    simulator: Simulator, oai: openai.AsyncOpenAI
) -> None:
    stored = await upload(oai, jsonl(chat_line("a", "x")))
    made = [
        await oai.batches.create(
            input_file_id=stored.id,
            endpoint=CHAT,
            completion_window="24h",
            metadata={"n": str(n)},
        )
        for n in range(3)
    ]
    first = await oai.batches.list(limit=2)
    assert [b.id for b in first.data] == [made[2].id, made[1].id] and first.has_more
    page = (await raw(simulator, "GET", "/v1/batches", params={"limit": 2})).json()
    for item in page["data"]:
        openai_strict(Batch, item)
    seen = [b.metadata async for b in await oai.batches.list(limit=1)]
    assert seen == [{"n": "2"}, {"n": "1"}, {"n": "0"}]
    refused = await raw(simulator, "GET", "/v1/batches", params={"limit": 0})
    assert refused.status_code == 400
    openai_strict(ErrorObject, refused.json()["error"])


@pytest.mark.asyncio
async def test_openai_batch_line_errors_go_to_the_error_file(
    simulator: Simulator, oai: openai.AsyncOpenAI, clock: FakeClock
) -> None:
    stored = await upload(
        oai,
        jsonl(
            chat_line("ok", "fine"),
            chat_line("boom", "x", sim={"outcome": "failed"}),
            chat_line("bad", "y", sim={"outcome": "rejected"}),
            orjson.dumps(
                {"custom_id": "resp", "method": "POST", "url": CHAT,
                 "body": {"model": "gpt-sim", "messages": []}}
            ),
        ),
    )  # fmt: skip
    batch = await oai.batches.create(
        input_file_id=stored.id, endpoint=CHAT, completion_window="24h"
    )
    clock.advance(1)
    done = await batch_body(simulator, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 3)
    assert done.output_file_id is not None and done.error_file_id is not None
    failures = {line["custom_id"]: line for line in await file_lines(oai, done.error_file_id)}
    assert {k: v["response"]["status_code"] for k, v in failures.items()} == {
        "boom": 500,
        "bad": 400,
        "resp": 400,
    }
    for line in failures.values():
        openai_strict(ErrorObject, line["response"]["body"]["error"])


@pytest.mark.asyncio
async def test_openai_batch_responses_lines(
    simulator: Simulator, oai: openai.AsyncOpenAI, clock: FakeClock
) -> None:
    line = {
        "custom_id": "r1",
        "method": "POST",
        "url": "/v1/responses",
        "body": {"model": "gpt-sim", "input": "hello"},
    }
    stored = await upload(oai, jsonl(orjson.dumps(line)))
    batch = await oai.batches.create(
        input_file_id=stored.id, endpoint="/v1/responses", completion_window="24h"
    )
    clock.advance(1)
    done = await batch_body(simulator, batch.id)
    assert done.output_file_id is not None
    [only] = await file_lines(oai, done.output_file_id)
    assert openai_strict(Response, only["response"]["body"]).status == "completed"


@pytest.mark.asyncio
async def test_openai_batch_refused_input_fails_with_errors(
    simulator: Simulator, oai: openai.AsyncOpenAI, clock: FakeClock
) -> None:
    stored = await upload(oai, jsonl(chat_line("same", "a"), chat_line("same", "b"), b"{oops"))
    batch = await oai.batches.create(
        input_file_id=stored.id, endpoint=CHAT, completion_window="24h",
        extra_headers=sim(latency_s=10),
    )  # fmt: skip
    assert (await batch_body(simulator, batch.id)).status == "validating"
    clock.advance(1)
    failed = await batch_body(simulator, batch.id)
    assert failed.status == "failed" and failed.failed_at is not None
    assert failed.errors is not None and failed.errors.data is not None
    assert [(e.code, e.line) for e in failed.errors.data] == [
        ("duplicate_custom_id", 2),
        ("invalid_json_line", 3),
    ]
    assert failed.output_file_id is None and failed.error_file_id is None
    for create, param in (
        ({"input_file_id": "file-nope", "endpoint": CHAT, "completion_window": "24h"},
         "input_file_id"),
        ({"input_file_id": stored.id, "endpoint": "/v1/nope", "completion_window": "24h"},
         "endpoint"),
        ({"input_file_id": stored.id, "endpoint": CHAT, "completion_window": "1h"},
         "completion_window"),
        ({"input_file_id": stored.id, "endpoint": CHAT, "completion_window": "24h",
          "metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ):  # fmt: skip
        answer = await raw(simulator, "POST", "/v1/batches", json=create)
        assert answer.status_code == 400
        assert openai_strict(ErrorObject, answer.json()["error"]).param == param
    with pytest.raises(openai.BadRequestError):
        await oai.files.create(file=("x.jsonl", b"{}"), purpose="fine-tune")


@pytest.mark.asyncio
async def test_openai_batch_expires_part_done(
    simulator: Simulator, oai: openai.AsyncOpenAI, clock: FakeClock
) -> None:
    stored = await upload(oai, jsonl(*(chat_line(f"c{i}", "x") for i in range(4))))
    batch = await oai.batches.create(
        input_file_id=stored.id, endpoint=CHAT, completion_window="24h",
        extra_headers=sim(latency_s=10, expires_after_s=6),
    )  # fmt: skip
    assert batch.expires_at is not None and batch.expires_at - batch.created_at in (5, 6, 7)
    clock.advance(6)
    expired = await batch_body(simulator, batch.id)
    assert expired.status == "expired" and expired.expired_at is not None
    assert expired.request_counts is not None
    assert (expired.request_counts.completed, expired.request_counts.total) == (2, 4)
    assert expired.output_file_id is not None and expired.error_file_id is not None
    done = [line["custom_id"] for line in await file_lines(oai, expired.output_file_id)]
    cut = await file_lines(oai, expired.error_file_id)
    assert done == ["c0", "c1"]
    assert [(x["custom_id"], x["error"]["code"]) for x in cut] == [
        ("c2", "batch_expired"),
        ("c3", "batch_expired"),
    ]


@pytest.mark.asyncio
async def test_openai_batch_cancel(
    simulator: Simulator, oai: openai.AsyncOpenAI, clock: FakeClock
) -> None:
    stored = await upload(oai, jsonl(*(chat_line(f"c{i}", "x") for i in range(4))))
    batch = await oai.batches.create(
        input_file_id=stored.id, endpoint=CHAT, completion_window="24h",
        extra_headers=sim(latency_s=10),
    )  # fmt: skip
    clock.advance(4)  # one line done
    cancelling = await oai.batches.cancel(batch.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    openai_strict(Batch, (await raw(simulator, "GET", f"/v1/batches/{batch.id}")).json())
    clock.advance(1)
    cancelled = await batch_body(simulator, batch.id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
    assert cancelled.request_counts is not None and cancelled.request_counts.completed == 1
    assert cancelled.error_file_id is not None and cancelled.output_file_id is not None
    codes = {x["error"]["code"] for x in await file_lines(oai, cancelled.error_file_id)}
    assert codes == {"batch_cancelled"}
    with pytest.raises(openai.BadRequestError) as refused:
        await oai.batches.cancel(batch.id)  # ended: too late
    openai_strict(ErrorObject, refused.value.response.json()["error"])
    assert (await raw(simulator, "GET", "/v1/batches/batch_nope")).status_code == 404


@pytest.mark.asyncio
async def test_openai_batch_create_reply_lost_and_failed(
    simulator: Simulator, oai: openai.AsyncOpenAI
) -> None:
    stored = await upload(oai, jsonl(chat_line("a", "x")))
    with pytest.raises(openai.APIConnectionError):
        await oai.batches.create(
            input_file_id=stored.id, endpoint=CHAT, completion_window="24h",
            metadata={"jobgate_key": "k1"}, extra_headers=sim(fail_with="drop"),
        )  # fmt: skip
    # The batch exists although the caller never heard of it: listing by metadata finds it.
    listed = [b async for b in await oai.batches.list()]
    found = [b for b in listed if (b.metadata or {}) == {"jobgate_key": "k1"}]
    assert len(found) == 1 and simulator.engine.created == [found[0].id]
    with pytest.raises(openai.InternalServerError):
        await oai.batches.create(
            input_file_id=stored.id, endpoint=CHAT, completion_window="24h",
            extra_headers=sim(fail_with="server_error", fail_times=1),
        )  # fmt: skip
    assert len(simulator.engine.created) == 1  # a refused create made nothing


def anthropic_request(custom_id: str, text: str) -> Any:
    return {
        "custom_id": custom_id,
        "params": {
            "model": "claude-sim-small",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": text}],
        },
    }


@pytest.mark.asyncio
async def test_anthropic_batch_expires_part_done(
    simulator: Simulator, claude: anthropic.AsyncAnthropic, clock: FakeClock
) -> None:
    batch = await claude.messages.batches.create(
        requests=[anthropic_request(f"r{i}", "x") for i in range(4)],
        extra_headers=sim(latency_s=8, expires_after_s=5),
    )
    assert (batch.expires_at - batch.created_at).total_seconds() == pytest.approx(5)
    clock.advance(4.5)
    still = await claude.messages.batches.retrieve(batch.id)
    # Anthropic counts requests out of `processing` only when the whole batch ends.
    assert still.processing_status == "in_progress" and still.request_counts.processing == 4
    clock.advance(1)
    headers = {"anthropic-version": "2023-06-01"}
    body = (await raw(simulator, "GET", f"/v1/messages/batches/{batch.id}", headers=headers)).json()
    ended = anthropic_strict(MessageBatch, body)
    assert ended.processing_status == "ended" and ended.results_url is not None
    counts = ended.request_counts
    assert (counts.succeeded, counts.expired, counts.processing) == (2, 2, 0)
    lines = (
        await raw(simulator, "GET", f"/v1/messages/batches/{batch.id}/results", headers=headers)
    ).text.splitlines()
    results = [anthropic_strict(MessageBatchIndividualResponse, orjson.loads(x)) for x in lines]
    assert [(r.custom_id, r.result.type) for r in results] == [
        ("r0", "succeeded"),
        ("r1", "succeeded"),
        ("r2", "expired"),
        ("r3", "expired"),
    ]


@pytest.mark.asyncio
async def test_anthropic_batch_create_reply_lost_and_listed(
    simulator: Simulator, claude: anthropic.AsyncAnthropic
) -> None:
    with pytest.raises(anthropic.APIConnectionError):
        await claude.messages.batches.create(
            requests=[anthropic_request("a", "x")], extra_headers=sim(fail_with="drop")
        )
    with pytest.raises(anthropic.InternalServerError):
        await claude.messages.batches.create(
            requests=[anthropic_request("b", "y")],
            extra_headers=sim(fail_with="overloaded", fail_times=1),
        )
    made = await claude.messages.batches.create(requests=[anthropic_request("c", "z")])
    listed = [b.id async for b in claude.messages.batches.list(limit=1)]
    assert listed == [made.id, simulator.engine.created[0]]
    headers = {"anthropic-version": "2023-06-01"}
    page = (await raw(simulator, "GET", "/v1/messages/batches", headers=headers)).json()
    assert page["has_more"] is False
    for item in page["data"]:
        anthropic_strict(MessageBatch, item)


@hypothesis.given(
    metadata=st.one_of(
        st.none(),
        st.integers(),
        st.dictionaries(
            st.text(max_size=70), st.one_of(st.text(max_size=520), st.integers()), max_size=18
        ),
    ),
    expires_after=st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=3)),
)
@hypothesis.example(metadata=None, expires_after=float("nan"))
@hypothesis.example(metadata=None, expires_after=float("inf"))
def test_openai_batch_create_edge_values(metadata: Any, expires_after: Any) -> None:
    """Any metadata and expiry either make a batch or are refused by name; nothing else."""
    state = OpenAIBatches(lambda: 1_000.0)
    stored = state.upload("in.jsonl", "batch", jsonl(chat_line("a", "x")))
    try:
        plan = sim_wire.directives({"sim": {"expires_after_s": expires_after}})
    except Exception as exc:
        assert type(exc).__name__ == "InvalidRequest"
        plan = sim_wire.Directives()
    body = {"input_file_id": stored["id"], "endpoint": CHAT, "completion_window": "24h"}
    try:
        made = state.create({**body, "metadata": metadata}, plan)
    except Refused as exc:
        assert exc.param == "metadata"
        return
    view = state.retrieve(made)
    assert view is not None and view["metadata"] == metadata
