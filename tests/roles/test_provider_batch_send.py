"""Sending a part of a batch as an OpenAI batch (against the simulator, on both stores): the
part is written before anything is sent, a lost create answer is resolved by finding the key in
the provider's list, and a crash between writing the intent and the create, or between the
create and recording its id, neither loses the provider batch nor creates a second one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobgate import errors, failpoints
from jobgate.config import ProviderConfig
from jobgate.domain import provider_batches
from jobgate.domain.provider_batches import Line, Part
from jobgate.providers.batch_parts import OpenAIParts
from jobgate.providers.openai_batches import OpenAIBatches
from jobgate.roles.provider_batch_send import send_part
from jobgate.simulator.server import Simulator
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.test_provider_batches_contract import _batch

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"
LINES_AS_WRITTEN = ProviderConfig(kind="openai")  # the lines carry no `sim` to keep or drop


def _lines(count: int) -> list[dict[str, object]]:
    return [
        {
            "custom_id": f"c{n}",
            "method": "POST",
            "url": CHAT,
            "body": {"model": "gpt-sim", "messages": [{"role": "user", "content": "x"}]},
        }
        for n in range(count)
    ]


def _part(batch_id: str) -> Part:
    lines = [Line(1, "oa", 100), Line(2, "oa", 100)]
    (part,) = provider_batches.plan(batch_id, lines, {"oa": "openai"}).parts
    return part


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock) as server:
        yield server


@pytest.fixture(autouse=True)
async def _disarmed_and_closed() -> AsyncIterator[None]:
    failpoints.arm("")
    yield
    failpoints.arm("")
    for client in _OPEN:
        await client.aclose()
    _OPEN.clear()


_OPEN: list[OpenAIBatches] = []


def _api(simulator: Simulator, clock: FakeClock, **headers: str) -> OpenAIBatches:
    config = ProviderConfig(kind="openai", base_url=simulator.openai_base_url, headers=headers)
    client = OpenAIBatches("oa", config, clock=clock)
    _OPEN.append(client)
    return client


def _batches_made(simulator: Simulator) -> list[str]:
    return [made for made in simulator.engine.created if made.startswith("batch_")]


async def test_a_part_is_sent_once_and_its_id_recorded(
    storage: Storage, simulator: Simulator, clock: FakeClock
) -> None:
    part = _part(await _batch(storage, clock))
    api = _api(simulator, clock)
    sent = await send_part(
        storage, OpenAIParts(api, LINES_AS_WRITTEN), part, lines=_lines(2), now=clock.now()
    )
    assert sent.provider_batch_id is not None and _batches_made(simulator) == [
        sent.provider_batch_id
    ]
    made = await api.retrieve(sent.provider_batch_id)
    assert made["metadata"] == {provider_batches.PART_KEY: part.key}
    requests = len(simulator.engine.requests)
    again = await send_part(
        storage, OpenAIParts(api, LINES_AS_WRITTEN), part, lines=_lines(2), now=clock.now()
    )
    assert again == sent and len(simulator.engine.requests) == requests  # nothing sent


async def test_a_lost_create_answer_is_found_by_its_key(
    storage: Storage, simulator: Simulator, clock: FakeClock
) -> None:
    part = _part(await _batch(storage, clock))
    # The simulator makes the batch, then closes the connection without an answer.
    api = _api(simulator, clock, **{"x-jobgate-sim": '{"fail_with": "drop"}'})
    sent = await send_part(
        storage, OpenAIParts(api, LINES_AS_WRITTEN), part, lines=_lines(2), now=clock.now()
    )
    assert _batches_made(simulator) == [sent.provider_batch_id]


async def test_a_create_lost_on_the_way_is_sent_on_the_next_pass_once(
    storage: Storage, simulator: Simulator, clock: FakeClock
) -> None:
    part = _part(await _batch(storage, clock))
    api = _api(simulator, clock)
    simulator.inject("POST", "/v1/batches", "drop")  # the connection drops, nothing made
    with pytest.raises(errors.ProviderOutcomeUnknown):
        await send_part(
            storage, OpenAIParts(api, LINES_AS_WRITTEN), part, lines=_lines(2), now=clock.now()
        )
    (intended,) = await storage.provider_batches_of(batch_id=part.batch_id)
    assert intended.provider_batch_id is None and _batches_made(simulator) == []
    sent = await send_part(
        storage, OpenAIParts(api, LINES_AS_WRITTEN), part, lines=_lines(2), now=clock.now()
    )
    assert _batches_made(simulator) == [sent.provider_batch_id]


@pytest.mark.parametrize("point", ["provider_batch_intended", "provider_batch_created"])
async def test_a_crash_between_the_steps_neither_loses_nor_doubles(
    storage: Storage, simulator: Simulator, clock: FakeClock, point: str
) -> None:
    part = _part(await _batch(storage, clock))
    api = _api(simulator, clock)
    failpoints.arm(f"{point}=error")
    with pytest.raises(failpoints.FailpointError):
        await send_part(
            storage, OpenAIParts(api, LINES_AS_WRITTEN), part, lines=_lines(2), now=clock.now()
        )
    failpoints.arm("")
    made_before = _batches_made(simulator)
    assert made_before == ([] if point == "provider_batch_intended" else made_before[:1])
    assert len(made_before) == (0 if point == "provider_batch_intended" else 1)
    clock.advance(30)  # the next pass of the batches role
    sent = await send_part(
        storage, OpenAIParts(api, LINES_AS_WRITTEN), part, lines=_lines(2), now=clock.now()
    )
    assert _batches_made(simulator) == [sent.provider_batch_id]
    (only,) = await storage.provider_batches_of(batch_id=part.batch_id)
    assert only.provider_batch_id == sent.provider_batch_id
