"""POST /v1/conversations/{id}/items (and the items of a create) under generated items at every
member a conversation item has: never a 5xx; a refusal is a 400 the official SDK reads as
BadRequestError naming a parameter under `items`, and adds nothing; accepted items come back,
and are listed, as the SDK's strict `ConversationItem`s; on both backends.

JOBGATE_STORM_EXAMPLES sets the number of examples; CI keeps it modest.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.api_server import Api

pytestmark = pytest.mark.asyncio
EXAMPLES = int(os.environ.get("JOBGATE_STORM_EXAMPLES", "60"))
PATHS: list[tuple[str | int, ...]] = [
    (0,), (0, "type"), (0, "role"), (0, "content"), (0, "content", 0), (0, "content", 0, "type"),
    (0, "content", 0, "text"), (0, "content", 0, "refusal"), (0, "content", 0, "image_url"),
    (0, "content", 0, "file_id"), (0, "content", 0, "detail"), (0, "call_id"), (0, "name"),
    (0, "arguments"), (0, "output"), (0, "id"), (0, "status"), (1,), (1, "type"),
]  # fmt: skip
WORDS = ["message", "user", "assistant", "system", "developer", "tool", "input_text",
         "output_text", "refusal", "input_image", "function_call", "function_call_output",
         "reasoning", "auto", "low", "original", "https://h.example/i.png", "", "\u0000",
         "é"]  # fmt: skip
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(WORDS),
    st.text(max_size=8),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["type", "text", "role", "content", "x"]), inner, max_size=3
        ),
    ),
    max_leaves=8,
)


@pytest.fixture
async def client(api: Api) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{api.url}/v1",
        api_key=await api.key("acme"),
        max_retries=0,
        _strict_response_validation=True,
    ) as sdk:
        yield sdk


def _set(items: list[Any], path: tuple[str | int, ...], value: Any) -> None:
    """Set `value` at `path`, replacing what is on the way by the containers it needs."""
    node: Any = items
    for step, after in itertools.pairwise(path):
        if isinstance(step, int):
            while len(node) <= step:
                node.append({})
        child: Any = node[step] if isinstance(step, int) else node.get(step)
        if not isinstance(child, list if isinstance(after, int) else dict) or (
            isinstance(after, int) and not child
        ):
            child = [{}] if isinstance(after, int) else {}
            node[step] = child
        node = child
    last = path[-1]
    if isinstance(last, int) and isinstance(node, list):
        while len(node) <= last:
            node.append({})
    node[last] = value


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(edits=st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3))
async def test_generated_items_are_added_whole_or_refused_with_a_400(
    client: openai.AsyncOpenAI, edits: list[tuple[tuple[str | int, ...], Any]]
) -> None:
    items: list[Any] = [{"type": "message", "role": "user", "content": "hi"}]
    for path, value in edits:
        _set(items, path, value)
    conversation = await client.conversations.create()
    try:
        added = await client.conversations.items.create(conversation.id, items=items)
    except openai.BadRequestError as refused:
        event("refused")
        param = refused.param or ""
        assert param == "items" or param.startswith("items") or param == "body", refused.body
        assert (await client.conversations.items.list(conversation.id)).data == []
        return
    except openai.UnprocessableEntityError:
        event("refused by the schema")  # the strict schema's own 422 (a body that is no list)
        return
    event("accepted")
    assert len(added.data) == len(items)
    listed = [item async for item in client.conversations.items.list(conversation.id, order="asc")]
    assert [item.id for item in listed] == [item.id for item in added.data]
