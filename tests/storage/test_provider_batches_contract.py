"""The ProviderBatchStore part of the contract, on both backends: a part is written before its
create and answered as it stands when written again (a replan after a crash), its provider id
is recorded once and never replaced by another (a second create's id is refused), and a part
whose create outcome is unknown stays listed without an id, for the listing to resolve."""

from __future__ import annotations

import pytest

from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant
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
