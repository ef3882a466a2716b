"""The ProviderBatchStore part of the contract, on both backends: a part is written before its
create and answered as it stands when written again (a replan after a crash), its provider id
is recorded once and never replaced by another (a second create's id is refused), and a part
whose create outcome is unknown stays listed without an id, for the listing to resolve; a
part's usage ledger row past the retention horizon is rolled up (still native-batch usage)
and deleted, once."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from jobgate.config import Settings
from jobgate.domain.retention import Horizon, horizon
from jobgate.roles.retention import Retention
from jobgate.storage.protocol import Storage
from jobgate.storage.records import BatchChunk, NativeResult, NewBatchItem, PartEnding
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job
from tests.storage.test_batches_contract import stored_file

pytestmark = pytest.mark.asyncio


async def _batch(storage: Storage, clock: FakeClock) -> str:
    acme = await make_tenant(storage)
    await stored_file(storage, acme.id)
    batch = await storage.batch_create(
        batch={
            "id": "batch_1",
            "tenant_id": acme.id,
            "endpoint": "/v1/chat/completions",
            "input_file_id": "file_1",
            "completion_window": "24h",
            "window_s": 86400,
            "metadata": None,
            "priority": 0,
        },
        now=clock.now(),
    )
    assert batch is not None
    return batch.id


async def test_a_part_is_intended_once_and_named_once(storage: Storage, clock: FakeClock) -> None:
    batch_id = await _batch(storage, clock)
    first = await storage.provider_batch_intend(
        part_key="batch_1.oa.0", batch_id=batch_id, provider="oa", lines=[1, 3, 4],
        now=clock.now(),
    )  # fmt: skip
    assert first.lines == (1, 3, 4) and first.provider_batch_id is None
    assert first.created_at == clock.now() and first.recorded_at is None
    clock.advance(5)
    again = await storage.provider_batch_intend(
        part_key="batch_1.oa.0", batch_id=batch_id, provider="oa", lines=[9], now=clock.now()
    )
    assert again == first  # a replan after a crash finds the part as it was written
    recorded = await storage.provider_batch_record(
        part_key="batch_1.oa.0", provider_batch_id="batch_abc", now=clock.now()
    )
    assert recorded is not None and recorded.provider_batch_id == "batch_abc"
    assert recorded.recorded_at == clock.now()
    clock.advance(5)
    same = await storage.provider_batch_record(
        part_key="batch_1.oa.0", provider_batch_id="batch_abc", now=clock.now()
    )
    assert same == recorded  # the same answer recorded twice changes nothing
    other = await storage.provider_batch_record(
        part_key="batch_1.oa.0", provider_batch_id="batch_other", now=clock.now()
    )
    assert other is None  # a second provider batch for one part is never recorded over the first
    assert await storage.provider_batch_record(
        part_key="batch_1.oa.9", provider_batch_id="batch_x", now=clock.now()
    ) is None  # fmt: skip
    (only,) = await storage.provider_batches_of(batch_id=batch_id)
    assert only.provider_batch_id == "batch_abc"


async def test_parts_of_a_batch_in_order_unknown_outcomes_without_an_id(
    storage: Storage, clock: FakeClock
) -> None:
    batch_id = await _batch(storage, clock)
    for index, provider in enumerate(("oa", "claude", "oa")):
        await storage.provider_batch_intend(
            part_key=f"batch_1.{provider}.{index}", batch_id=batch_id, provider=provider,
            lines=[index + 1], now=clock.now(),
        )  # fmt: skip
        clock.advance(1)
    await storage.provider_batch_record(
        part_key="batch_1.claude.1", provider_batch_id="msgbatch_1", now=clock.now()
    )
    parts = await storage.provider_batches_of(batch_id=batch_id)
    assert [(p.part_key, p.provider_batch_id) for p in parts] == [
        ("batch_1.oa.0", None),
        ("batch_1.claude.1", "msgbatch_1"),
        ("batch_1.oa.2", None),
    ]
    assert await storage.provider_batches_of(batch_id="batch_none") == []


async def _native_batch(storage: Storage, clock: FakeClock) -> tuple[str, str, str]:
    """An in-progress batch held by a lease (its token) with three native lines for `oa`
    (lines 1, 2, 4) and a job's line (3): (batch id, tenant id, token)."""
    batch_id = await _batch(storage, clock)
    acme = await storage.tenant_get(tenant_id="ten_acme")
    assert acme is not None
    (claimed,) = await storage.batch_claim_live(limit=8, lease_s=60, now=clock.now())
    token = claimed.lease_token
    assert token is not None
    await storage.batch_update(
        batch_id=batch_id, from_statuses=["validating"], status="in_progress", lease_token=token
    )
    job = new_job(acme)
    request = {"model": "gpt-x", "messages": [{"role": "user", "content": "\x00 kept"}]}
    items = [
        NewBatchItem(1, "a\x00", None, provider="oa", request=request),
        NewBatchItem(2, "b", None, provider="oa", request={**request, "n": 2}),
        NewBatchItem(3, "c", job.id),
        NewBatchItem(4, "d", None, provider="oa", request={**request, "n": 4}),
    ]
    chunk = BatchChunk(batch_id, token, [job], items, 1)
    assert await storage.batch_chunk_insert(chunk=chunk, now=clock.now()) is not None
    return batch_id, acme.id, token


def _ending(batch_id: str, tenant_id: str, token: str, **changes: Any) -> PartEnding:
    ok = {"id": "batch_req_1", "response": {"status_code": 200, "body": {"x": "\x00"}}}
    failed = {"id": "batch_req_2", "response": None, "error": {"code": "batch_expired"}}
    ending = PartEnding(
        part_key=f"{batch_id}.oa.0",
        batch_id=batch_id,
        tenant_id=tenant_id,
        lease_token=token,
        status="expired",
        request_counts={"total": 3, "completed": 1, "failed": 0},
        results=[
            NativeResult(1, "succeeded", ok, input_tokens=10, output_tokens=5, cached_tokens=2),
            NativeResult(2, "not_run", failed),
            NativeResult(4, "failed", {"id": "r4", "response": {"status_code": 500}}),
        ],
        provider="oa",
        model="gpt-x",
    )
    return dataclasses.replace(ending, **changes)


async def test_native_lines_are_kept_with_their_requests(
    storage: Storage, clock: FakeClock
) -> None:
    batch_id, _, _ = await _native_batch(storage, clock)
    lines = await storage.batch_native_lines(batch_id=batch_id, after_line=0, limit=10)
    assert [(line.line, line.provider, line.request.get("n")) for line in lines] == [
        (1, "oa", None),
        (2, "oa", 2),
        (4, "oa", 4),
    ]
    assert lines[0].request["messages"][0]["content"] == "\x00 kept"
    paged = await storage.batch_native_lines(batch_id=batch_id, after_line=1, limit=1)
    assert [line.line for line in paged] == [2]
    page = await storage.batch_items_page(batch_id=batch_id, after_line=0, limit=10)
    assert [(i.line, i.custom_id, i.provider, i.outcome) for i in page] == [
        (1, "a\x00", "oa", None),
        (2, "b", "oa", None),
        (3, "c", None, None),
        (4, "d", "oa", None),
    ]


async def test_an_ended_part_is_read_back_once_under_the_fence(
    storage: Storage, clock: FakeClock
) -> None:
    batch_id, tenant_id, token = await _native_batch(storage, clock)
    await storage.provider_batch_intend(
        part_key=f"{batch_id}.oa.0", batch_id=batch_id, provider="oa", lines=[1, 2, 4]
    )
    seen = {"total": 3, "completed": 1, "failed": 0}
    assert not await storage.provider_batch_seen(
        part_key=f"{batch_id}.oa.0", lease_token="stale", status="in_progress", request_counts=seen
    )
    assert await storage.provider_batch_seen(
        part_key=f"{batch_id}.oa.0", lease_token=token, status="in_progress", request_counts=seen
    )
    (part,) = await storage.provider_batches_of(batch_id=batch_id)
    assert (part.status, part.request_counts, part.collected_at) == ("in_progress", seen, None)
    # Another pass's token writes nothing.
    assert not await storage.provider_batch_end(
        ending=_ending(batch_id, tenant_id, "stale"), now=clock.now()
    )
    assert (await storage.batch_counts(batch_id=batch_id)).completed == 0
    assert await storage.provider_batch_end(
        ending=_ending(batch_id, tenant_id, token), now=clock.now()
    )
    (part,) = await storage.provider_batches_of(batch_id=batch_id)
    assert part.status == "expired" and part.collected_at is not None
    page = await storage.batch_items_page(batch_id=batch_id, after_line=0, limit=10)
    ended = {i.line: (i.outcome, i.result_line) for i in page if i.provider is not None}
    assert ended[1][0] == "succeeded" and ended[1][1] is not None
    assert ended[1][1]["response"]["body"] == {"x": "\x00"}
    assert ended[2][0] == "not_run" and ended[4][0] == "failed"
    counts = await storage.batch_counts(batch_id=batch_id)
    assert (counts.items, counts.completed, counts.failed, counts.live) == (4, 1, 1, 1)
    assert (counts.input_tokens, counts.output_tokens, counts.cached_tokens) == (10, 5, 2)
    # Read back again (a pass that died before its answer): nothing changes, billed once.
    other = _ending(batch_id, tenant_id, token, results=[NativeResult(2, "succeeded", {})])
    assert await storage.provider_batch_end(ending=other, now=clock.now())
    assert (await storage.batch_counts(batch_id=batch_id)).completed == 1
    usage = await storage.usage_by_model_since(day=clock.now().date())
    native = [row for row in usage if row.native_batch]
    assert [(r.tenant_id, r.provider, r.model) for r in native] == [(tenant_id, "oa", "gpt-x")]
    assert (native[0].input_tokens, native[0].output_tokens) == (10, 5)
    assert native[0].cache_read_tokens == 2
    assert (await storage.usage_tokens_since(day=clock.now().date()))[tenant_id] == 15


async def test_a_cancelling_batch_still_reads_its_parts_back(
    storage: Storage, clock: FakeClock
) -> None:
    batch_id, tenant_id, token = await _native_batch(storage, clock)
    await storage.provider_batch_intend(
        part_key=f"{batch_id}.oa.0", batch_id=batch_id, provider="oa", lines=[1, 2, 4]
    )
    cancelled = await storage.batch_cancel(
        batch_id=batch_id, from_statuses=["in_progress"], actor="api"
    )
    assert cancelled is not None and cancelled.status == "cancelling"
    assert await storage.provider_batch_end(
        ending=_ending(batch_id, tenant_id, token), now=clock.now()
    )
    await storage.batch_update(
        batch_id=batch_id, from_statuses=["cancelling"], status="finalizing", lease_token=token
    )
    late = _ending(batch_id, tenant_id, token, part_key=f"{batch_id}.oa.1")
    assert not await storage.provider_batch_end(ending=late, now=clock.now())  # finalizing


async def test_retention_rolls_a_parts_usage_up_once_and_deletes_its_ledger_row(
    storage: Storage, clock: FakeClock, settings: Settings
) -> None:
    batch_id, tenant_id, token = await _native_batch(storage, clock)
    await storage.provider_batch_intend(
        part_key=f"{batch_id}.oa.0", batch_id=batch_id, provider="oa", lines=[1, 2, 4]
    )
    billed_at = clock.now()
    assert await storage.provider_batch_end(
        ending=_ending(batch_id, tenant_id, token), now=billed_at
    )
    day = billed_at.date()
    by_model = await storage.usage_by_model_since(day=day)
    tokens = await storage.usage_tokens_since(day=day)
    assert [(r.native_batch, r.input_tokens) for r in by_model] == [(True, 10)]
    # Billed after the horizon: kept in the ledger.
    early = Horizon(now=billed_at, completed_before=billed_at - timedelta(seconds=1))
    assert await storage.retention_batch_usage(horizon=early, limit=10) == 0
    # Past it: summed into the rollup and deleted, once (a second sweep finds nothing).
    past = billed_at + timedelta(seconds=120)
    retention = Retention(storage=storage, settings=settings.model_copy(update={"retention_s": 60}))
    swept = await retention.sweep_once(now=past)
    assert swept["usage_ledger"] == 1
    assert await storage.retention_batch_usage(horizon=horizon(past, retention_s=60), limit=10) == 0
    # The budgets and the spend read the same usage, still as native-batch usage.
    assert await storage.usage_by_model_since(day=day) == by_model
    assert await storage.usage_tokens_since(day=day) == tokens
    assert await storage.usage_by_model_since(day=day + timedelta(days=1)) == []
    # A part read back again after its row is gone bills nothing: it is marked read back.
    assert await storage.provider_batch_end(ending=_ending(batch_id, tenant_id, token), now=past)
    assert await storage.usage_tokens_since(day=day) == tokens
    assert await storage.retention_batch_usage(horizon=horizon(past, retention_s=0), limit=10) == 0
