"""The Message Batches client against the simulator (a fake clock drives the batches): find
takes a batch by its size and the part's tag in its results, never one of another size, one
recorded for another part, or one older than the part; a candidate still processing cannot be
told and is refused as undecided; errors are classified as the Anthropic adapter's."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.domain.provider_batches import Part
from jobgate.providers import anthropic_batches
from jobgate.providers.anthropic_batches import AnthropicBatches
from jobgate.providers.batch_parts import AnthropicParts
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock
from jobgate.wire import anthropic_batch_results as ids

pytestmark = pytest.mark.asyncio


def caller_line(custom_id: str, **sim: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude-sim", "messages": [{"role": "user", "content": "x"}]}
    if sim:
        body["sim"] = sim
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def part(index: int, size: int) -> Part:
    return Part("batch_1", "claude", index, tuple(range(size)), 100)


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock) as server:
        yield server


def config_for(simulator: Simulator, **extra: Any) -> ProviderConfig:
    """The simulator's Message Batches, each line's own `sim` directives sent along."""
    return ProviderConfig(
        kind="anthropic", base_url=simulator.anthropic_base_url, sim_directives=True, **extra
    )


@pytest.fixture
async def parts(simulator: Simulator, clock: FakeClock) -> AsyncIterator[AnthropicParts]:
    config = config_for(simulator)
    api = AnthropicBatches("claude", config, clock=clock)
    yield AnthropicParts(api, config)
    await api.aclose()


async def made(parts: AnthropicParts, chosen: Part, **sim: Any) -> dict[str, Any]:
    lines = [caller_line(f"c{i}", **sim) for i in range(len(chosen.lines))]
    return await parts.create_part(chosen, lines)


async def test_find_takes_the_parts_batch_once_ended_and_no_other(
    parts: AnthropicParts, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(anthropic_batches, "LIST_PAGE", 1)
    start = clock.now()
    mine, same_size, other_size = part(0, 2), part(1, 2), part(2, 3)
    created = await made(parts, mine, latency_s=5)
    foreign = await made(parts, same_size, latency_s=1)
    await made(parts, other_size, latency_s=1)
    clock.advance(2)  # the foreign one has ended, mine has not
    with pytest.raises(errors.ProviderOutcomeUnknown) as undecided:
        await parts.find_part(mine, since=start, known_ids=())
    assert created["id"] in str(undecided.value) and foreign["id"] not in str(undecided.value)
    assert await parts.find_part(part(3, 3), since=start, known_ids=()) is None  # foreign
    clock.advance(4)
    found = await parts.find_part(mine, since=start, known_ids=())
    assert found is not None and found["id"] == created["id"]
    assert await parts.find_part(part(4, 2), since=start, known_ids=()) is None
    later = start + dt.timedelta(seconds=1)  # made before: never looked at
    assert await parts.find_part(mine, since=later, known_ids=()) is None


async def test_batches_recorded_for_other_parts_are_no_candidates(
    parts: AnthropicParts, clock: FakeClock
) -> None:
    start = clock.now()
    first = await made(parts, part(0, 2), latency_s=60)
    second = part(1, 2)
    with pytest.raises(errors.ProviderOutcomeUnknown):
        await parts.find_part(second, since=start, known_ids=())
    assert await parts.find_part(second, since=start, known_ids={first["id"]}) is None


async def test_requests_carry_the_parts_tag_and_come_back(
    parts: AnthropicParts, simulator: Simulator, clock: FakeClock
) -> None:
    chosen = part(0, 3)
    batch = await made(parts, chosen)
    sent = simulator.engine.requests[-1].body or {}
    custom_ids = [r["custom_id"] for r in sent["requests"]]
    assert custom_ids == [ids.request_custom_id(chosen.key, i) for i in range(3)]
    clock.advance(1)
    ended = await parts.api.retrieve(batch["id"])
    assert ids.part_state(ended).ended
    data = await parts.api.results(batch["id"])
    found = ids.results_by_line(chosen.key, 3, data)
    assert [r and r["type"] for r in found] == ["succeeded"] * 3
    again = await parts.api.cancel(batch["id"])  # ended: answered as it stands
    assert again["id"] == batch["id"] and again["processing_status"] == "ended"


async def test_a_lost_create_reply_is_found_not_created_again(
    simulator: Simulator, clock: FakeClock
) -> None:
    drop = orjson.dumps({"fail_with": "drop", "latency_s": 3}).decode()
    config = config_for(simulator, headers={"x-jobgate-sim": drop})
    api = AnthropicBatches("claude", config, clock=clock)
    parts = AnthropicParts(api, config)
    chosen, start = part(0, 2), clock.now()
    try:
        with pytest.raises(errors.ProviderOutcomeUnknown):
            await made(parts, chosen)
        with pytest.raises(errors.ProviderOutcomeUnknown):  # processing: cannot tell yet
            await parts.find_part(chosen, since=start, known_ids=())
        clock.advance(3)
        found = await parts.find_part(chosen, since=start, known_ids=())
    finally:
        await api.aclose()
    assert found is not None and simulator.engine.created == [found["id"]]


async def test_errors_are_classified_as_the_adapters(
    parts: AnthropicParts, simulator: Simulator, clock: FakeClock
) -> None:
    for fault, kind in (
        ("rate_limit", errors.ProviderRateLimited),
        ("overloaded", errors.ProviderRetryable),
        ("server_error", errors.ProviderRetryable),
        ("invalid_request", errors.ProviderFatal),
    ):
        simulator.inject("POST", "/v1/messages/batches", fault)
        with pytest.raises(kind) as raised:
            await made(parts, part(0, 1))
        assert type(raised.value) is kind or fault == "rate_limit"
    with pytest.raises(errors.ProviderFatal) as missing:
        await parts.api.retrieve("msgbatch_nope")
    assert missing.value.status_code == 404
    simulator.inject("GET", "/v1/messages/batches", "overloaded")
    with pytest.raises(errors.ProviderRetryable):
        await parts.find_part(part(0, 1), since=clock.now(), known_ids=())
    assert simulator.engine.created == []


async def test_a_line_anthropic_cannot_take_is_refused_before_sending(
    parts: AnthropicParts, simulator: Simulator
) -> None:
    odd = caller_line("a")
    odd["body"]["n"] = 3
    with pytest.raises(errors.InvalidRequest):
        parts.check(odd)
    assert parts.check(caller_line("b")) > 0
    with pytest.raises(errors.ProviderFatal):
        await parts.create_part(part(0, 1), [odd])
    assert simulator.engine.requests == []
