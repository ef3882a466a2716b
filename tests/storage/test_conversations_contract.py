"""The ConversationStore part of the contract, on both backends: items are appended in order
and paged both ways, another tenant's conversation is absent, appending the same items again
adds nothing (a turn added twice after a crash), concurrent appends never share a position,
and deleting a conversation takes its items and turns with it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


def _item(item_id: str, text: str = "hi") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": text}],
    }


async def _conversation(storage: Storage, clock: FakeClock, tenant_id: str, cid: str) -> None:
    await storage.conversation_insert(
        conversation_id=cid, tenant_id=tenant_id, metadata={"topic": "t"}, now=clock.now()
    )


async def test_items_append_in_order_and_page_both_ways(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    await _conversation(storage, clock, acme.id, "conv_1")
    got = await storage.conversation_get(tenant_id=acme.id, conversation_id="conv_1")
    assert got is not None and got.metadata == {"topic": "t"} and got.created_at == clock.now()
    first = await storage.conversation_item_append(
        tenant_id=acme.id, conversation_id="conv_1", items=[_item("msg_a"), _item("msg_b")]
    )
    second = await storage.conversation_item_append(
        tenant_id=acme.id,
        conversation_id="conv_1",
        items=[_item("msg_c", "é \u2603")],
        response_id="resp_1",
    )
    assert [i.id for i in first] == ["msg_a", "msg_b"] and second[0].response_id == "resp_1"
    assert second[0].item == _item("msg_c", "é \u2603")

    async def page(after: str | None, limit: int, descending: bool) -> list[str]:
        items = await storage.conversation_item_page(
            tenant_id=acme.id,
            conversation_id="conv_1",
            after=after,
            limit=limit,
            descending=descending,
        )
        return [item.id for item in items]

    assert await page(None, 10, False) == ["msg_a", "msg_b", "msg_c"]
    assert await page(None, 10, True) == ["msg_c", "msg_b", "msg_a"]
    assert await page("msg_a", 1, False) == ["msg_b"]
    assert await page("msg_c", 10, True) == ["msg_b", "msg_a"]
    assert await page("msg_unknown", 2, False) == ["msg_a", "msg_b"]


async def test_another_tenants_conversation_is_absent(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    await _conversation(storage, clock, acme.id, "conv_1")
    assert await storage.conversation_get(tenant_id=beta.id, conversation_id="conv_1") is None
    added = await storage.conversation_item_append(
        tenant_id=beta.id, conversation_id="conv_1", items=[_item("msg_a")]
    )
    assert added == []
    page = await storage.conversation_item_page(
        tenant_id=beta.id, conversation_id="conv_1", after=None, limit=10, descending=False
    )
    assert page == []
    assert await storage.conversation_delete(tenant_id=beta.id, conversation_id="conv_1") is False
    assert await storage.conversation_get(tenant_id=acme.id, conversation_id="conv_1")


async def test_appending_the_same_items_again_adds_nothing(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    await _conversation(storage, clock, acme.id, "conv_1")
    items = [_item("msg_a"), _item("msg_b")]
    await storage.conversation_item_append(
        tenant_id=acme.id, conversation_id="conv_1", items=items, response_id="resp_1"
    )
    again = await storage.conversation_item_append(
        tenant_id=acme.id, conversation_id="conv_1", items=items, response_id="resp_1"
    )
    assert again == []
    page = await storage.conversation_item_page(
        tenant_id=acme.id, conversation_id="conv_1", after=None, limit=10, descending=False
    )
    assert [item.id for item in page] == ["msg_a", "msg_b"]


async def test_concurrent_appends_never_share_a_position(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    await _conversation(storage, clock, acme.id, "conv_1")
    await asyncio.gather(
        *(
            storage.conversation_item_append(
                tenant_id=acme.id,
                conversation_id="conv_1",
                items=[_item(f"msg_{n}_a"), _item(f"msg_{n}_b")],
            )
            for n in range(8)
        )
    )
    page = await storage.conversation_item_page(
        tenant_id=acme.id, conversation_id="conv_1", after=None, limit=100, descending=False
    )
    assert len(page) == 16 and len({item.position for item in page}) == 16
    ids = [item.id for item in page]
    for n in range(8):  # each append's items stay together, in their order
        assert ids.index(f"msg_{n}_b") == ids.index(f"msg_{n}_a") + 1


async def test_turns_are_remembered_pruned_and_deleted_with_the_conversation(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    await _conversation(storage, clock, acme.id, "conv_1")
    stored = (await submit_one(storage, job=new_job(acme), now=clock.now())).job
    for response_id in (stored.id, "resp_never_stored"):
        await storage.conversation_turn_insert(
            conversation_id="conv_1", response_id=response_id, now=clock.now()
        )
        await storage.conversation_turn_insert(
            conversation_id="conv_1", response_id=response_id, now=clock.now()
        )
    assert await storage.conversation_turn_list(conversation_id="conv_1") == sorted(
        [stored.id, "resp_never_stored"]
    )
    pruned = await storage.conversation_turn_prune(
        conversation_id="conv_1", grace_s=60, now=clock.now()
    )
    assert pruned == 0  # too young: its create may still be under way
    clock.advance(61)
    pruned = await storage.conversation_turn_prune(
        conversation_id="conv_1", grace_s=60, now=clock.now()
    )
    assert pruned == 1
    assert await storage.conversation_turn_list(conversation_id="conv_1") == [stored.id]
    await storage.conversation_item_append(
        tenant_id=acme.id, conversation_id="conv_1", items=[_item("msg_a")]
    )
    assert await storage.conversation_delete(tenant_id=acme.id, conversation_id="conv_1")
    assert await storage.conversation_get(tenant_id=acme.id, conversation_id="conv_1") is None
    assert await storage.conversation_turn_list(conversation_id="conv_1") == []
    page = await storage.conversation_item_page(
        tenant_id=acme.id, conversation_id="conv_1", after=None, limit=10, descending=False
    )
    assert page == []
