"""Provider-native batches through the batches role, on both stores, against the simulator's
Batch API: lines for a provider with `native_batches` go to its batches (split at its
`batch_max_requests`), the others run as jobs, and one output file comes back with every
custom_id once in input order; a crash after a part's intent or after its create neither
loses nor doubles a provider batch; cancel and expiry pass through to live parts; the parts'
usage is billed once, at the batch price."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
import pytest

from jobgate import failpoints
from jobgate.config import ModelPrice, ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.roles import native_dispatch
from jobgate.roles.batch_runner import BatchRunner
from jobgate.services.batches import BatchService
from jobgate.simulator.server import Simulator
from jobgate.storage.postgres.store import is_postgres
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, SequentialIds
from tests.roles.test_batch_runner import make_batch_of

pytestmark = pytest.mark.asyncio
CHAT = "/v1/chat/completions"
PRICE = ModelPrice(input_per_mtok=Decimal(1_000_000), output_per_mtok=Decimal(2_000_000))


@pytest.fixture
async def simulator(clock: FakeClock) -> AsyncIterator[Simulator]:
    async with Simulator(clock=clock) as server:
        yield server


_OPEN: list[Any] = []  # what a test opened: closed after it


@pytest.fixture(autouse=True)
async def _disarmed_and_closed() -> AsyncIterator[None]:
    yield
    failpoints.arm("")
    for item in _OPEN:
        await item.aclose()
    _OPEN.clear()


def native_runtime(
    storage: Storage,
    settings: Settings,
    clock: FakeClock,
    simulator: Simulator,
    *,
    latency_s: float | None = None,
) -> Runtime:
    """A runtime with `oa` (kind openai, native batches of at most 3 lines, on the simulator)
    beside the built-in `sim`, both priced."""
    headers = {} if latency_s is None else {"x-jobgate-sim": f'{{"latency_s": {latency_s}}}'}
    oa = ProviderConfig(
        kind="openai",
        base_url=simulator.openai_base_url,
        native_batches=True,
        batch_max_requests=3,
        headers=headers,
        prices={"*": PRICE},
    )
    sim = ProviderConfig(kind="sim", model_prefixes=("sim-",), prices={"*": PRICE})
    provider = OpenAIProvider("oa", oa, clock=clock)
    _OPEN.append(provider)
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), "oa": provider},
        configs={"sim": sim, "oa": oa},
        default="sim",
    )
    settings = settings.model_copy(
        update={"batch_poll_interval_s": 1.0, "providers": {"oa": oa, "sim": sim}}
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


def runner_of(runtime: Runtime) -> BatchRunner:
    runner = runtime.batch_runner()
    _OPEN.append(runner.native)
    return runner


def native_at(native: int, jobs: int) -> list[bool]:
    """Which lines go to `oa`: `native` of them, interleaved with `jobs` for `sim`."""
    kinds: list[bool] = []
    while native or jobs:
        if native:
            kinds.append(True)
            native -= 1
        if jobs:
            kinds.append(False)
            jobs -= 1
    return kinds


def lines_for(native: int, jobs: int) -> list[dict[str, Any]]:
    """`native` lines for `oa` and `jobs` for `sim`, interleaved, all of one model."""
    return [
        {
            "custom_id": f"c{n}",
            "method": "POST",
            "url": CHAT,
            "body": {
                "model": "oa/sim-echo" if to_oa else "sim-echo",
                "messages": [{"role": "user", "content": f"n{n}"}],
            },
        }
        for n, to_oa in enumerate(native_at(native, jobs))
    ]


async def real_time_reaches(clock: FakeClock) -> None:
    """Wait until the real time reaches the fake clock's: PostgreSQL claims by its own clock,
    and the runner stores its jobs at the fake clock's time (passed as `now`), so a fake clock
    ahead of the real one leaves them unclaimable for the difference."""
    ahead = (clock.now() - datetime.now(UTC)).total_seconds()
    if ahead > 0:
        await asyncio.sleep(min(ahead, 1.0))


async def run_until_ended(
    runtime: Runtime, runner: BatchRunner, batch_id: str, clock: FakeClock
) -> Any:
    for _ in range(60):
        await runner.batches_once(now=clock.now())
        if is_postgres(runtime.storage):
            await real_time_reaches(clock)
        await runtime.worker().run_once(limit=50)
        clock.advance(1.0)
        batch = await runtime.storage.batch_get(batch_id=batch_id)
        assert batch is not None
        if batch.status in ("completed", "cancelled", "expired", "failed"):
            return batch
    parts = await runtime.storage.provider_batches_of(batch_id=batch_id)
    raise AssertionError(f"the batch did not end: {batch}, {parts}")


async def file_lines(storage: Storage, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    chunks = await storage.file_chunks(file_id=file_id, from_seq=0, limit=1000)
    data = b"".join(chunk.data for chunk in chunks)
    return [orjson.loads(raw) for raw in data.splitlines() if raw.strip()]


def provider_batches_made(simulator: Simulator) -> list[str]:
    return [made for made in simulator.engine.created if made.startswith("batch_")]


async def test_native_and_job_lines_come_back_in_one_output_file(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    runtime = native_runtime(storage, settings, clock, simulator)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, lines_for(7, 5))
    runner = runner_of(runtime)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "completed" and (batch.completed_count, batch.failed_count) == (12, 0)
    output = await file_lines(storage, batch.output_file_id)
    assert [line["custom_id"] for line in output] == [f"c{n}" for n in range(12)]
    assert await file_lines(storage, batch.error_file_id) == []
    assert all(line["response"]["status_code"] == 200 for line in output)
    native = [line for line, to_oa in zip(output, native_at(7, 5), strict=True) if to_oa]
    assert all(line["response"]["body"]["model"] == "sim-echo" for line in native)
    # 7 lines at 3 a part: 3 provider batches, each created once; 5 jobs, none for oa.
    assert len(provider_batches_made(simulator)) == 3
    jobs = await storage.job_list(tenant_id=tenant.tenant.id, limit=100)
    assert len(jobs) == 5 and {job.provider for job in jobs} == {"sim"}
    view = await BatchService(storage=storage, settings=runtime.settings, ids=runtime.ids).view(
        batch
    )
    assert view["request_counts"] == {"total": 12, "completed": 12, "failed": 0}
    parts = view["provider_batches"]
    assert [part["provider"] for part in parts] == ["oa"] * 3
    assert sorted(part["id"] for part in parts) == sorted(provider_batches_made(simulator))
    assert [part["status"] for part in parts] == ["completed"] * 3
    assert sum(part["request_counts"]["completed"] for part in parts) == 7
    assert view["usage"]["input_tokens"] > 0


@pytest.mark.parametrize("point", ["provider_batch_intended", "provider_batch_created"])
async def test_a_crash_while_sending_neither_loses_nor_doubles_a_part(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator, point: str
) -> None:
    runtime = native_runtime(storage, settings, clock, simulator)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, lines_for(7, 0))
    runner = runner_of(runtime)
    failpoints.arm(f"{point}=error@2")  # the second part's send dies there
    for _ in range(3):
        await runner.batches_once(now=clock.now())
    failpoints.arm("")
    # The pass failed after the first part: a later pass (another process's, here a new
    # runner: nothing remembered) resumes from the database.
    runner = runner_of(runtime)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "completed" and batch.completed_count == 7
    assert len(provider_batches_made(simulator)) == 3
    output = await file_lines(storage, batch.output_file_id)
    assert [line["custom_id"] for line in output] == [f"c{n}" for n in range(7)]


async def test_cancel_passes_through_to_the_live_parts(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    # Validated 30 s after its create, its lines finishing from 110 s on: cancelled first.
    runtime = native_runtime(storage, settings, clock, simulator, latency_s=300)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, lines_for(5, 2))
    runner = runner_of(runtime)
    for _ in range(3):
        await runner.batches_once(now=clock.now())
    made = provider_batches_made(simulator)
    assert len(made) == 2
    service = BatchService(storage=storage, settings=runtime.settings, ids=runtime.ids)
    await service.cancel(tenant_id=tenant.tenant.id, batch_id=batch_id)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "cancelled"
    for provider_id in made:  # every part was cancelled at the provider
        assert (simulator.engine.openai_batches.retrieve(provider_id) or {}).get(
            "status"
        ) == "cancelled"
    failures = await file_lines(storage, batch.error_file_id)
    output = await file_lines(storage, batch.output_file_id)
    ids = sorted(line["custom_id"] for line in failures + output)
    assert ids == sorted(f"c{n}" for n in range(7))
    oa_ids = {f"c{n}" for n, to_oa in enumerate(native_at(5, 2)) if to_oa}
    native = [line for line in failures if line["custom_id"] in oa_ids]
    assert len(native) == 5 and {line["error"]["code"] for line in native} == {"batch_cancelled"}
    assert len(provider_batches_made(simulator)) == 2  # cancelled, never sent again


async def test_an_expired_batch_cancels_its_parts_and_reads_their_lines_as_expired(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    # The part's lines finish over 80,000 s: two of three within the batch's 24 hours.
    runtime = native_runtime(storage, settings, clock, simulator, latency_s=100_000)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, lines_for(3, 0))
    runner = runner_of(runtime)
    for _ in range(3):
        await runner.batches_once(now=clock.now())
    (made,) = provider_batches_made(simulator)
    clock.advance(timedelta(hours=24, minutes=5).total_seconds())  # past the window
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "expired" and (batch.completed_count, batch.failed_count) == (2, 0)
    # The provider's own 24-hour window ends with jobgate's: expired there, or cancelled.
    ended = (simulator.engine.openai_batches.retrieve(made) or {}).get("status")
    assert ended in ("expired", "cancelled")
    output = await file_lines(storage, batch.output_file_id)
    assert [line["custom_id"] for line in output] == ["c0", "c1"]
    failures = await file_lines(storage, batch.error_file_id)
    assert [line["custom_id"] for line in failures] == ["c2"]
    assert failures[0]["error"]["code"] == "batch_expired"


async def test_native_usage_is_billed_once_at_the_batch_price(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    runtime = native_runtime(storage, settings, clock, simulator)
    tenant = await runtime.tenants.create("acme")
    # The same requests twice: once as native lines (oa), once as jobs (sim), one price.
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, lines_for(3, 0))
    runner = runner_of(runtime)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    usage = await storage.usage_by_model_since(day=(await storage.database_now()).date())
    (native,) = [row for row in usage if row.native_batch]
    assert (native.provider, native.model) == ("oa", "sim-echo")
    assert native.input_tokens == batch.usage["input_tokens"] > 0
    spent = await runtime.limits.spend_today()
    full = native.input_tokens * 1 + native.output_tokens * 2  # USD at PRICE
    assert spent[tenant.tenant.id] == Decimal(full) * Decimal("0.5")
    # Read back again (a pass that re-ran the end) bills nothing more.
    again = await storage.usage_by_model_since(day=(await storage.database_now()).date())
    assert [dataclasses.astuple(row) for row in again] == [
        dataclasses.astuple(row) for row in usage
    ]


async def test_a_failed_batch_cancels_its_parts(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    runtime = native_runtime(storage, settings, clock, simulator, latency_s=300)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, lines_for(4, 0))
    runner = runner_of(runtime)
    for _ in range(3):
        await runner.batches_once(now=clock.now())
    made = provider_batches_made(simulator)
    assert len(made) == 2
    batch = await storage.batch_get(batch_id=batch_id)
    assert batch is not None
    await runner.parts.cancel_all(batch)  # what a batch failing alone does last
    clock.advance(31)  # validated, then cancelled
    for provider_id in made:
        ended = simulator.engine.openai_batches.retrieve(provider_id) or {}
        assert ended.get("status") == "cancelled"


def anthropic_runtime(
    storage: Storage,
    settings: Settings,
    clock: FakeClock,
    simulator: Simulator,
    *,
    latency_s: float | None = None,
    native: bool = True,
) -> Runtime:
    """`an` (kind anthropic, Message Batches of at most 2 requests, on the simulator; with
    `native` False, without native batches)."""
    headers = {} if latency_s is None else {"x-jobgate-sim": f'{{"latency_s": {latency_s}}}'}
    an = ProviderConfig(
        kind="anthropic",
        base_url=simulator.anthropic_base_url,
        native_batches=native,
        batch_max_requests=2,
        headers=headers,
        prices={"*": PRICE},
    )
    sim = ProviderConfig(kind="sim", model_prefixes=("sim-",))
    provider = AnthropicProvider("an", an, clock=clock)
    _OPEN.append(provider)
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), "an": provider},
        configs={"sim": sim, "an": an},
        default="sim",
    )
    settings = settings.model_copy(
        update={"batch_poll_interval_s": 1.0, "providers": {"an": an, "sim": sim}}
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


def responses_lines(count: int) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"caller's id {n} ✓",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": "an/claude-sonnet-4-5", "input": f"line {n}"},
        }
        for n in range(count)
    ]


async def test_anthropic_message_batches_carry_responses_lines(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    runtime = anthropic_runtime(storage, settings, clock, simulator)
    tenant = await runtime.tenants.create("acme")
    lines = responses_lines(3)
    batch_id = await make_batch_of(runtime, tenant.tenant.id, "/v1/responses", lines)
    runner = runner_of(runtime)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "completed" and (batch.completed_count, batch.failed_count) == (3, 0)
    output = await file_lines(storage, batch.output_file_id)
    assert [line["custom_id"] for line in output] == [f"caller's id {n} ✓" for n in range(3)]
    assert all(line["response"]["body"]["object"] == "response" for line in output)
    made = [m for m in simulator.engine.created if m.startswith("msgbatch_")]
    assert len(made) == 2  # 3 requests at 2 a batch
    view = await BatchService(storage=storage, settings=runtime.settings, ids=runtime.ids).view(
        batch
    )
    assert [p["status"] for p in view["provider_batches"]] == ["completed"] * 2
    assert sorted(p["id"] for p in view["provider_batches"]) == sorted(made)
    usage = await storage.usage_by_model_since(day=(await storage.database_now()).date())
    (native,) = [row for row in usage if row.native_batch]
    assert (native.provider, native.model) == ("an", "claude-sonnet-4-5")
    assert native.input_tokens == batch.usage["input_tokens"] > 0


async def test_a_cancel_reaches_anthropic_message_batches(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    runtime = anthropic_runtime(storage, settings, clock, simulator, latency_s=300)
    tenant = await runtime.tenants.create("acme")
    lines = responses_lines(4)
    batch_id = await make_batch_of(runtime, tenant.tenant.id, "/v1/responses", lines)
    runner = runner_of(runtime)
    for _ in range(3):
        await runner.batches_once(now=clock.now())
    made = [m for m in simulator.engine.created if m.startswith("msgbatch_")]
    assert len(made) == 2
    service = BatchService(storage=storage, settings=runtime.settings, ids=runtime.ids)
    await service.cancel(tenant_id=tenant.tenant.id, batch_id=batch_id)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "cancelled" and batch.completed_count == 0
    failures = await file_lines(storage, batch.error_file_id)
    assert [line["custom_id"] for line in failures] == [line["custom_id"] for line in lines]
    assert {line["error"]["code"] for line in failures} == {"batch_cancelled"}
    view = await service.view(batch)
    assert [p["status"] for p in view["provider_batches"]] == ["cancelled"] * 2


async def test_a_pass_sends_a_few_parts_and_the_next_the_rest(
    storage: Storage,
    settings: Settings,
    clock: FakeClock,
    simulator: Simulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(native_dispatch, "PARTS_PER_PASS", 2)
    runtime = native_runtime(storage, settings, clock, simulator)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, lines_for(9, 0))
    runner = runner_of(runtime)
    await runner.batches_once(now=clock.now())  # validated
    await runner.batches_once(now=clock.now())  # expanded, two parts sent
    assert len(provider_batches_made(simulator)) == 2
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "completed" and batch.completed_count == 9
    assert len(provider_batches_made(simulator)) == 3


async def test_a_part_whose_provider_lost_native_batches_ends_with_the_batch(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    runtime = native_runtime(storage, settings, clock, simulator, latency_s=300)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, lines_for(2, 1))
    runner = runner_of(runtime)
    for _ in range(3):
        await runner.batches_once(now=clock.now())
    assert len(provider_batches_made(simulator)) == 1
    # Restarted without native batches for `oa`: its part cannot be read; it waits.
    lost = runner.native.api("oa")
    assert lost is not None
    await lost.aclose()
    runner.native._apis["oa"] = None
    for _ in range(3):
        await runtime.worker().run_once(limit=10)
        await runner.batches_once(now=clock.now())
    batch = await storage.batch_get(batch_id=batch_id)
    assert batch is not None and batch.status == "in_progress"
    service = BatchService(storage=storage, settings=runtime.settings, ids=runtime.ids)
    await service.cancel(tenant_id=tenant.tenant.id, batch_id=batch_id)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "cancelled" and batch.completed_count == 1  # the job's line
    failures = await file_lines(storage, batch.error_file_id)
    assert {line["error"]["code"] for line in failures} == {"batch_cancelled"}
    assert len(failures) == 2


def chat_lines(count: int) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"chat {n}",
            "method": "POST",
            "url": CHAT,
            "body": {
                "model": "an/claude-sonnet-4-5",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": f"line {n}"},
                ],
                "max_completion_tokens": 64,
            },
        }
        for n in range(count)
    ]


async def test_anthropic_message_batches_carry_chat_lines(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    runtime = anthropic_runtime(storage, settings, clock, simulator)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, chat_lines(3))
    runner = runner_of(runtime)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert batch.status == "completed" and (batch.completed_count, batch.failed_count) == (3, 0)
    output = await file_lines(storage, batch.output_file_id)
    assert [line["custom_id"] for line in output] == ["chat 0", "chat 1", "chat 2"]
    for line in output:
        body = line["response"]["body"]
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["role"] == "assistant"
    made = [m for m in simulator.engine.created if m.startswith("msgbatch_")]
    assert len(made) == 2  # 3 requests at 2 a batch
    usage = await storage.usage_by_model_since(day=(await storage.database_now()).date())
    assert [(row.native_batch, row.provider) for row in usage] == [(True, "an")]  # no job ran


async def test_chat_lines_for_anthropic_without_native_batches_are_refused_as_jobs_would_be(
    storage: Storage, settings: Settings, clock: FakeClock, simulator: Simulator
) -> None:
    runtime = anthropic_runtime(storage, settings, clock, simulator, native=False)
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch_of(runtime, tenant.tenant.id, CHAT, chat_lines(2))
    runner = runner_of(runtime)
    batch = await run_until_ended(runtime, runner, batch_id, clock)
    assert (batch.completed_count, batch.failed_count) == (0, 2)
    failures = await file_lines(storage, batch.error_file_id)
    codes = {line["response"]["body"]["error"]["code"] for line in failures}
    assert codes == {"unsupported_endpoint"}
    assert simulator.engine.created == []
