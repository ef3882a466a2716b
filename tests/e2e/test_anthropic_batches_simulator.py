"""The Message Batches client against `jobgate simulator` as a real process: a part whose
create answer is lost is found at the provider once its batch has ended (never created
twice), and an ended part's results come back as the caller's lines, every custom_id once, in
the part's order, with per-request errors and expiry passed through."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx
import orjson
import pytest

from jobgate import errors
from jobgate.clock import SystemClock
from jobgate.config import ProviderConfig
from jobgate.domain.provider_batches import Part
from jobgate.providers import anthropic_batch_lines
from jobgate.providers.anthropic_batches import AnthropicBatches
from jobgate.providers.batch_parts import AnthropicParts
from jobgate.wire import anthropic_batch_results as ids
from tests.support.processes import ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
DEADLINE_S = 30.0


def start_simulator(harness: ProcessHarness) -> str:
    process = harness.process("simulator", "--port", "0").start()

    def listening() -> str | None:
        if not process.alive:
            raise AssertionError(process.tail())
        match = re.search(r"OpenAI base_url (http://\S+)/v1", process.stdout())
        return match.group(1) if match else None

    return wait_until(listening, timeout_s=60, what="the simulator")


def caller_line(custom_id: str, text: str, **sim: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude-sim", "messages": [{"role": "user", "content": text}]}
    if sim:
        body["sim"] = sim
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


async def until_found(parts: AnthropicParts, part: Part, since: Any) -> dict[str, Any]:
    """find_part, again while it cannot tell (the batch is still processing)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            found = await parts.find_part(part, since=since, known_ids=())
        except errors.ProviderOutcomeUnknown:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
            continue
        assert found is not None, "the lost batch was not found"
        return found


async def until_ended(api: AnthropicBatches, batch_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        batch = await api.retrieve(batch_id)
        if ids.part_state(batch).ended or time.monotonic() > deadline:
            return batch
        await asyncio.sleep(0.2)


async def flow(url: str) -> None:
    clock = SystemClock()
    drop = orjson.dumps({"fail_with": "drop", "latency_s": 1}).decode()
    lossy_config = ProviderConfig(kind="anthropic", base_url=url, headers={"x-jobgate-sim": drop})
    # The simulator reads each line's `sim` directives: only a provider configured so sends them.
    config = ProviderConfig(kind="anthropic", base_url=url, sim_directives=True)
    lossy = AnthropicParts(AnthropicBatches("claude", lossy_config), lossy_config)
    parts = AnthropicParts(AnthropicBatches("claude", config), config)
    try:
        # A create whose answer is lost: found, not created again.
        lost = Part("batch_e2e", "claude", 0, (1, 2, 3), 300)
        since = clock.now()
        lines = [caller_line(f"lost {i}", f"t{i}") for i in range(3)]
        with pytest.raises(errors.ProviderOutcomeUnknown):
            await lossy.create_part(lost, lines)
        found = await until_found(parts, lost, since)
        async with httpx.AsyncClient(base_url=url) as control:
            state = (await control.get("/_simulator/state")).json()
        assert state["created"] == [found["id"]]

        # A part's results, back as the caller's lines.
        part = Part("batch_e2e", "claude", 1, (4, 5, 6, 7), 400)
        callers = [
            caller_line("any text / at all", "one", latency_s=0.3),
            caller_line("x" * 512, "two", latency_s=0.1),
            caller_line("three", "three", latency_s=0.2, outcome="failed"),
            caller_line("four", "four", outcome="never"),
        ]
        created = await parts.create_part(part, callers)
        assert created["processing_status"] == "in_progress"
        # `never` expires at the batch's 24 hours: cancel instead, to end it now.
        await asyncio.sleep(0.5)
        await parts.api.cancel(created["id"])
        ended = await until_ended(parts.api, created["id"])
        state_of = ids.part_state(ended)
        assert state_of.ended and state_of.counts.total == 4
        assert (state_of.raw_counts["succeeded"], state_of.raw_counts["errored"]) == (2, 1)
        assert state_of.raw_counts["canceled"] == 1
        back = anthropic_batch_lines.lines_back(
            callers,
            part_key=part.key,
            provider_batch_id=created["id"],
            results=await parts.api.results(created["id"]),
            created_at=int(clock.now().timestamp()),
        )
        assert [r.custom_id for r in back] == [line["custom_id"] for line in callers]
        assert [r.succeeded for r in back] == [True, True, False, False]
        assert back[0].line["response"]["body"]["choices"][0]["message"]["content"] == "echo: one"
        assert back[2].line["response"]["status_code"] == 500
        assert back[3].line["error"]["code"] == "batch_cancelled"
    finally:
        await lossy.api.aclose()
        await parts.api.aclose()


def test_the_client_against_the_simulator_process(harness: ProcessHarness) -> None:
    url = start_simulator(harness)
    asyncio.run(flow(url))
