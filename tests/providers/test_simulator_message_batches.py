"""The simulator's Anthropic Message Batches, driven by the official `anthropic` SDK in strict
mode with every payload checked against the SDK types (no member they do not name): what
create refuses, the lifecycle and its counts, results only once ended (finishing order, the
Messages endpoint's answer), list pages both ways, cancel, delete, archive, and faults."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import hypothesis
import orjson
import pytest
from anthropic.types import ErrorResponse
from anthropic.types.messages import (
    DeletedMessageBatch,
    MessageBatch,
    MessageBatchIndividualResponse,
)
from hypothesis import strategies as st

from jobgate.simulator import anthropic_batches, profiles
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock
from jobgate.wire.sim import Directives
from tests.providers.sdk import anthropic_strict

VERSION = {"anthropic-version": "2023-06-01"}
PAGE_KEYS = {"data", "has_more", "first_id", "last_id"}
HI = [{"role": "user", "content": "hi"}]


def sim(**directives: object) -> dict[str, str]:
    return {"x-jobgate-sim": orjson.dumps(directives).decode()}


def request(custom_id: str, text: str = "x", **params: Any) -> Any:
    body = {
        "model": "claude-sim",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": text}],
    }
    return {"custom_id": custom_id, "params": {**body, **params}}


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock) as server:
        yield server


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
    async with httpx.AsyncClient(base_url=simulator.url, headers=VERSION) as client:
        return await client.request(method, path, **kwargs)


async def batch_json(simulator: Simulator, batch_id: str) -> MessageBatch:
    answer = await raw(simulator, "GET", f"/v1/messages/batches/{batch_id}")
    assert answer.status_code == 200
    return anthropic_strict(MessageBatch, answer.json())


async def result_lines(simulator: Simulator, batch_id: str) -> list[MessageBatchIndividualResponse]:
    answer = await raw(simulator, "GET", f"/v1/messages/batches/{batch_id}/results")
    assert answer.status_code == 200, answer.text
    return [
        anthropic_strict(MessageBatchIndividualResponse, orjson.loads(line))
        for line in answer.text.splitlines()
    ]


async def refused(simulator: Simulator, body: Any, status: int = 400) -> str:
    answer = await raw(simulator, "POST", "/v1/messages/batches", json=body)
    assert answer.status_code == status, answer.text
    if status == 413:  # `request_too_large`: published, but outside the SDK's closed union
        assert answer.json()["error"]["type"] == "request_too_large"
        return str(answer.json()["error"]["message"])
    error = anthropic_strict(ErrorResponse, answer.json())
    assert error.error.type == "invalid_request_error"
    return error.error.message


async def test_create_refuses_what_anthropic_refuses(
    simulator: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "at least 1 item" in await refused(simulator, {"requests": []})
    assert "requests.0.custom_id: String should match pattern" in await refused(
        simulator, {"requests": [request("has space")]}
    )
    assert "should match pattern" in await refused(simulator, {"requests": [request("a" * 65)]})
    assert "requests.1.custom_id: Duplicate" in await refused(
        simulator, {"requests": [request("same"), request("same")]}
    )
    assert "requests.0.params.top_k: Extra inputs" in await refused(
        simulator, {"requests": [request("a", top_k=3)]}
    )
    assert "requests.0.params.max_tokens" in await refused(
        simulator, {"requests": [request("a", max_tokens=0)]}
    )
    assert "metadata: Extra inputs" in await refused(
        simulator, {"requests": [request("a")], "metadata": {"k": "v"}}
    )
    monkeypatch.setattr(anthropic_batches, "MAX_REQUESTS", 2)
    assert "at most 2 items" in await refused(
        simulator, {"requests": [request(f"r{i}") for i in range(3)]}
    )
    monkeypatch.setattr(anthropic_batches, "MAX_BODY_BYTES", 100)
    await refused(simulator, {"requests": [request("a", "x" * 200)]}, status=413)
    assert simulator.engine.created == []  # nothing refused was made


async def test_lifecycle_counts_results_and_the_messages_answer(
    simulator: Simulator, claude: anthropic.AsyncAnthropic, clock: FakeClock
) -> None:
    made = await claude.messages.batches.create(
        requests=[request("r0", "first"), request("r1", "second")], extra_headers=sim(latency_s=4)
    )
    assert made.processing_status == "in_progress" and made.results_url is None
    assert (made.expires_at - made.created_at).total_seconds() == 86_400
    early = await raw(simulator, "GET", f"/v1/messages/batches/{made.id}/results")
    assert early.status_code == 404
    anthropic_strict(ErrorResponse, early.json())
    clock.advance(3)  # r0 is done; the counts say so only at the end
    midway = await batch_json(simulator, made.id)
    assert midway.request_counts.processing == 2 and midway.ended_at is None
    clock.advance(1)
    ended = await batch_json(simulator, made.id)
    assert ended.processing_status == "ended" and ended.request_counts.succeeded == 2
    assert ended.ended_at is not None and ended.results_url is not None
    assert ended.results_url.endswith(f"/v1/messages/batches/{made.id}/results")
    lines = await result_lines(simulator, made.id)
    assert [line.custom_id for line in lines] == ["r0", "r1"]
    again = await result_lines(simulator, made.id)
    assert [line.model_dump() for line in again] == [line.model_dump() for line in lines]
    direct = await claude.messages.create(
        model="claude-sim", max_tokens=16, messages=[{"role": "user", "content": "second"}]
    )
    succeeded = lines[1].result
    assert succeeded.type == "succeeded"
    assert succeeded.message.content == direct.content and succeeded.message.usage == direct.usage
    async for item in await claude.messages.batches.results(made.id):
        assert item.result.type == "succeeded"


async def test_results_come_in_finishing_order_with_per_request_outcomes(
    simulator: Simulator, clock: FakeClock
) -> None:
    requests = [
        request("slow", sim={"latency_s": 9}),
        request("broken", sim={"latency_s": 1, "outcome": "failed"}),
        request("invalid", sim={"latency_s": 2, "outcome": "rejected"}),
        request("quick", sim={"latency_s": 3}),
    ]
    answer = await raw(simulator, "POST", "/v1/messages/batches", json={"requests": requests})
    made = anthropic_strict(MessageBatch, answer.json())
    clock.advance(9)
    counts = (await batch_json(simulator, made.id)).request_counts
    assert (counts.succeeded, counts.errored, counts.processing) == (2, 2, 0)
    lines = await result_lines(simulator, made.id)
    assert [line.custom_id for line in lines] == ["broken", "invalid", "quick", "slow"]
    kinds = {}
    for line in lines:
        if line.result.type == "errored":
            kinds[line.custom_id] = line.result.error.error.type
    assert kinds == {"broken": "api_error", "invalid": "invalid_request_error"}


async def test_list_pages_both_ways(simulator: Simulator, claude: anthropic.AsyncAnthropic) -> None:
    made = [(await claude.messages.batches.create(requests=[request("a")])).id for _ in range(5)]
    newest_first = list(reversed(made))
    first = (await raw(simulator, "GET", "/v1/messages/batches", params={"limit": 2})).json()
    assert set(first) == PAGE_KEYS
    for item in first["data"]:
        anthropic_strict(MessageBatch, item)
    assert [b["id"] for b in first["data"]] == newest_first[:2]
    assert (first["first_id"], first["last_id"], first["has_more"]) == (
        newest_first[0], newest_first[1], True
    )  # fmt: skip
    after = await raw(
        simulator, "GET", "/v1/messages/batches", params={"limit": 2, "after_id": first["last_id"]}
    )
    assert [b["id"] for b in after.json()["data"]] == newest_first[2:4]
    before = await raw(
        simulator, "GET", "/v1/messages/batches", params={"limit": 1, "before_id": newest_first[2]}
    )
    assert [b["id"] for b in before.json()["data"]] == [newest_first[1]]
    assert before.json()["has_more"] is True
    walked = [b.id async for b in claude.messages.batches.list(limit=2)]
    assert walked == newest_first
    bad = await raw(simulator, "GET", "/v1/messages/batches", params={"limit": 1001})
    assert bad.status_code == 400
    anthropic_strict(ErrorResponse, bad.json())


async def test_cancel_delete_and_archive(
    simulator: Simulator, claude: anthropic.AsyncAnthropic, clock: FakeClock
) -> None:
    made = await claude.messages.batches.create(
        requests=[request("a"), request("b")], extra_headers=sim(latency_s=10)
    )
    with pytest.raises(anthropic.BadRequestError) as busy:
        await claude.messages.batches.delete(made.id)
    anthropic_strict(ErrorResponse, busy.value.response.json())
    clock.advance(6)  # `a` finished before the cancel
    canceling = await claude.messages.batches.cancel(made.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at
    clock.advance(1)
    ended = await batch_json(simulator, made.id)
    counts = ended.request_counts
    assert ended.processing_status == "ended" and (counts.succeeded, counts.canceled) == (1, 1)
    types = {line.custom_id: line.result.type for line in await result_lines(simulator, made.id)}
    assert types == {"a": "succeeded", "b": "canceled"}
    clock.advance(29 * 86_400)
    archived = await batch_json(simulator, made.id)
    assert archived.archived_at is not None
    gone = await raw(simulator, "GET", f"/v1/messages/batches/{made.id}/results")
    assert gone.status_code == 404
    anthropic_strict(ErrorResponse, gone.json())
    deleted = await raw(simulator, "DELETE", f"/v1/messages/batches/{made.id}")
    assert anthropic_strict(DeletedMessageBatch, deleted.json()).id == made.id
    with pytest.raises(anthropic.NotFoundError) as missing:
        await claude.messages.batches.retrieve(made.id)
    anthropic_strict(ErrorResponse, missing.value.response.json())


async def test_a_lost_create_reply_leaves_the_batch_listed(
    simulator: Simulator, claude: anthropic.AsyncAnthropic, clock: FakeClock
) -> None:
    with pytest.raises(anthropic.APIConnectionError):
        await claude.messages.batches.create(
            requests=[request("a"), request("b"), request("c")],
            extra_headers=sim(fail_with="drop", latency_s=8, expires_after_s=5),
        )
    (listed,) = [b async for b in claude.messages.batches.list()]
    assert listed.id == simulator.engine.created[0]
    clock.advance(5)  # expires half done
    counts = (await claude.messages.batches.retrieve(listed.id)).request_counts
    assert (counts.succeeded, counts.expired) == (1, 2)


@hypothesis.given(
    custom_ids=st.lists(st.text(max_size=70), min_size=1, max_size=4),
    params=st.dictionaries(
        st.sampled_from(["model", "max_tokens", "messages", "top_k", "sim", "system"]),
        st.one_of(st.none(), st.integers(-2, 3), st.text(max_size=3), st.just(HI)),
        max_size=6,
    ),
)
@hypothesis.example(
    custom_ids=["a", "b_-9"], params={"model": "m", "max_tokens": 1, "messages": HI, "sim": None}
)
def test_any_create_either_makes_a_batch_or_is_refused_by_name(
    custom_ids: list[str], params: dict[str, Any]
) -> None:
    state = anthropic_batches.MessageBatches(lambda: 1_000.0, profiles.profile())
    requests = [{"custom_id": custom_id, "params": params} for custom_id in custom_ids]
    try:
        made = state.create({"requests": requests}, Directives())
    except anthropic_batches.Refused as exc:
        assert exc.status == 400 and exc.message.startswith("requests.")
        return
    assert all(anthropic_batches.CUSTOM_ID.match(c) for c in custom_ids)
    assert len(set(custom_ids)) == len(custom_ids)
    anthropic_strict(MessageBatch, state.retrieve(made, base_url="http://sim"))
