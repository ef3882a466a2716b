"""The Conversations API and the refusals of a create that continues earlier turns, through the
official `openai` SDK in strict mode against a real jobgate HTTP server, on both backends:
OpenAI's shapes (`conversation`, `conversation.deleted`, item lists), pagination both ways,
another tenant's objects answering as missing ones, and OpenAI's errors for a previous
response that is unknown, another tenant's, deleted (itself or earlier in its chain), purged
by retention, not stored, or not finished, and for both ways of continuing at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import openai
import pytest
from openai.types.conversations import ConversationDeletedResource

from jobgate.config import Settings
from jobgate.roles.retention import Retention
from jobgate.testing import Block, FakeClock, ScriptedProvider
from tests.api_server import Api

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def workers(api: Api) -> AsyncIterator[None]:
    worker = api.runtime.worker()
    running = asyncio.create_task(worker.run())
    yield
    worker.request_stop()
    await asyncio.wait_for(running, 30)


async def _sdk(api: Api, tenant: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{api.url}/v1",
        api_key=await api.key(tenant),
        max_retries=0,
        _strict_response_validation=True,
    )


@pytest.fixture
async def client(api: Api, workers: None) -> AsyncIterator[openai.AsyncOpenAI]:
    async with await _sdk(api, "acme") as sdk:
        yield sdk


@pytest.fixture
async def stranger(api: Api) -> AsyncIterator[openai.AsyncOpenAI]:
    async with await _sdk(api, "beta") as sdk:
        yield sdk


def _not_found(refused: pytest.ExceptionInfo[openai.BadRequestError], response_id: str) -> None:
    error = refused.value
    assert error.status_code == 400 and error.code == "previous_response_not_found"
    assert error.param == "previous_response_id" and error.type == "invalid_request_error"
    assert isinstance(error.body, dict)
    assert error.body["message"] == f"Previous response with id '{response_id}' not found."


# -- the Conversations API --------------------------------------------------------------------


async def test_a_conversation_is_created_read_paged_and_deleted(
    client: openai.AsyncOpenAI,
) -> None:
    created = await client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "first"}], metadata={"k": "v"}
    )
    assert created.object == "conversation" and created.id.startswith("conv_")
    assert (await client.conversations.retrieve(created.id)) == created
    added = await client.conversations.items.create(
        created.id,
        items=[
            {"type": "message", "role": "assistant", "content": "second"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "third"},
        ],
    )
    assert added.object == "list" and [item.type for item in added.data] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert added.first_id == added.data[0].id and added.last_id == added.data[-1].id
    newest = await client.conversations.items.list(created.id, limit=2)
    assert [item.id for item in newest.data] == [added.data[2].id, added.data[1].id]
    assert newest.has_more is True
    every = [item async for item in client.conversations.items.list(created.id, limit=1)]
    assert len(every) == 4 and every[0].id == added.data[2].id  # newest first, page by page
    oldest = [item async for item in client.conversations.items.list(created.id, order="asc")]
    assert [item.id for item in oldest] == [item.id for item in reversed(every)]
    first = oldest[0]
    assert first.type == "message" and first.role == "user" and first.status == "completed"
    assert first.content[0].type == "input_text" and first.content[0].text == "first"
    deleted = await client.conversations.delete(created.id)
    assert deleted == ConversationDeletedResource(
        id=created.id, object="conversation.deleted", deleted=True
    )
    with pytest.raises(openai.NotFoundError):
        await client.conversations.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        await client.conversations.items.list(created.id)


async def test_an_empty_conversation_lists_no_items(client: openai.AsyncOpenAI) -> None:
    created = await client.conversations.create()
    page = await client.conversations.items.list(created.id)
    assert page.data == [] and page.has_more is False and page.last_id is None


async def test_another_tenants_conversation_is_not_found(
    client: openai.AsyncOpenAI, stranger: openai.AsyncOpenAI
) -> None:
    created = await client.conversations.create(metadata={"k": "v"})
    for attempt in (
        stranger.conversations.retrieve(created.id),
        stranger.conversations.delete(created.id),
        stranger.conversations.items.list(created.id),
        stranger.conversations.items.create(
            created.id, items=[{"type": "message", "role": "user", "content": "x"}]
        ),
        stranger.responses.create(model="sim-echo", input="x", conversation=created.id),
    ):
        with pytest.raises(openai.NotFoundError):
            await attempt
    assert (await client.conversations.retrieve(created.id)).id == created.id
    assert (await client.conversations.items.list(created.id)).data == []


@pytest.mark.parametrize(
    ("items", "param"),
    [
        ([{"type": "message", "role": "tool", "content": "x"}], "items[0].role"),
        ([{"type": "message", "role": "user", "content": []}], "items[0].content"),
        ([{"type": "item_reference", "id": "msg_1"}], "items[0].type"),
        ([{"type": "function_call", "call_id": "c", "name": "f"}], "items[0].arguments"),
        ([{"role": "user", "content": [{"type": "input_audio"}]}], "items[0].content[0].type"),
        ([{"role": "user", "content": "x"}] * 21, "items"),
    ],
)
async def test_items_that_are_not_conversation_items_are_refused(
    client: openai.AsyncOpenAI, items: Any, param: str
) -> None:
    created = await client.conversations.create()
    with pytest.raises(openai.BadRequestError) as refused:
        await client.conversations.items.create(created.id, items=items)
    assert refused.value.param == param or param == "items", refused.value.body
    assert (await client.conversations.items.list(created.id)).data == []


# -- continuing: what OpenAI refuses ----------------------------------------------------------


async def test_an_unknown_previous_response_is_not_found(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model="sim-echo", input="x", previous_response_id="resp_nope")
    _not_found(refused, "resp_nope")


async def test_another_tenants_previous_response_is_not_found(
    client: openai.AsyncOpenAI, stranger: openai.AsyncOpenAI
) -> None:
    mine = await client.responses.create(model="sim-echo", input="secret")
    with pytest.raises(openai.BadRequestError) as refused:
        await stranger.responses.create(model="sim-echo", input="x", previous_response_id=mine.id)
    _not_found(refused, mine.id)


async def test_a_deleted_response_in_the_chain_is_not_found(client: openai.AsyncOpenAI) -> None:
    first = await client.responses.create(model="sim-echo", input="one")
    second = await client.responses.create(
        model="sim-echo", input="two", previous_response_id=first.id
    )
    await client.responses.delete(first.id)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="sim-echo", input="three", previous_response_id=second.id
        )
    _not_found(refused, first.id)
    await client.responses.delete(second.id)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="sim-echo", input="three", previous_response_id=second.id
        )
    _not_found(refused, second.id)


async def test_a_response_purged_by_retention_is_not_found(
    client: openai.AsyncOpenAI, api: Api, settings: Settings, clock: FakeClock
) -> None:
    first = await client.responses.create(model="sim-echo", input="one")
    retention = Retention(storage=api.runtime.storage, settings=settings)
    later = await api.runtime.storage.database_now() + timedelta(seconds=settings.retention_s * 2)
    assert (await retention.sweep_once(now=later))["jobs"] >= 1
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model="sim-echo", input="two", previous_response_id=first.id)
    _not_found(refused, first.id)


async def test_a_response_not_stored_cannot_be_continued(client: openai.AsyncOpenAI) -> None:
    unstored = await client.responses.create(model="sim-echo", input="one", store=False)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="sim-echo", input="two", previous_response_id=unstored.id
        )
    _not_found(refused, unstored.id)


async def test_a_response_still_running_cannot_be_continued_yet(
    client: openai.AsyncOpenAI, scripted: ScriptedProvider
) -> None:
    block = Block()
    scripted.script.append(block)
    running = await client.responses.create(model="scripted/m", input="one", background=True)
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="sim-echo", input="two", previous_response_id=running.id
        )
    assert refused.value.code == "previous_response_not_completed"
    assert refused.value.param == "previous_response_id"
    block.release.set()


async def test_previous_response_id_and_conversation_together_are_refused(
    client: openai.AsyncOpenAI,
) -> None:
    first = await client.responses.create(model="sim-echo", input="one")
    conversation = await client.conversations.create()
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model="sim-echo",
            input="two",
            previous_response_id=first.id,
            conversation=conversation.id,
        )
    assert refused.value.code == "mutually_exclusive_parameters"
    assert refused.value.param == "conversation"
    assert (await client.conversations.items.list(conversation.id)).data == []


async def test_an_unknown_conversation_is_not_found(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="sim-echo", input="x", conversation="conv_nope")


async def test_a_failed_or_unstored_turn_adds_nothing_to_the_conversation(
    client: openai.AsyncOpenAI,
) -> None:
    conversation = await client.conversations.create()
    with pytest.raises(openai.BadRequestError):  # fails at the provider: no turn
        await client.responses.create(
            model="sim-echo",
            input="x",
            conversation=conversation.id,
            extra_body={"sim": {"fail_with": "invalid_request"}},
        )
    await client.responses.create(
        model="sim-echo", input="unstored", conversation=conversation.id, store=False
    )
    kept = await client.responses.create(
        model="sim-echo", input="kept", conversation=conversation.id
    )
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert [item.id for item in items][-1] == kept.output[0].id
    assert len(items) == 2  # the kept turn: its input, its output


async def test_a_deleted_response_leaves_its_turn_in_the_conversation(
    client: openai.AsyncOpenAI,
) -> None:
    conversation = await client.conversations.create()
    first = await client.responses.create(
        model="sim-echo", input="one", conversation=conversation.id
    )
    second = await client.responses.create(
        model="sim-echo", input="two", conversation=conversation.id
    )
    await client.responses.delete(first.id)
    third = await client.responses.create(
        model="sim-echo", input="three", conversation=conversation.id
    )
    assert third.output_text == "echo: three" and second.output_text == "echo: two"
    items = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert len(items) == 6
