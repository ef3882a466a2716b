"""Client.submit_many / AsyncClient.submit_many against a real server, on both backends."""

from __future__ import annotations

import asyncio
from typing import Any

from jobgate.client import AsyncClient, BadRequestError, Client, Job
from jobgate.client import bulk as client_bulk
from tests.api_server import Api

CHAT = "/v1/chat/completions"


def item(text: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": text}]}
    return {"endpoint": CHAT, "body": body, **extra}


async def test_async_submit_many_answers_in_order_and_splits_calls(api: Api) -> None:
    key = await api.key("acme")
    items = [item(f"n{i}", metadata={"n": i}) for i in range(client_bulk.MAX_PER_CALL + 5)]
    items[3] = {"endpoint": CHAT, "body": {"model": "sim-echo"}, "priority": 42}
    async with AsyncClient(api.url, key) as client:
        results = await client.submit_many(items)
    assert len(results) == len(items)
    assert isinstance(results[3], BadRequestError) and results[3].param == "priority"
    jobs = [r for r in results if isinstance(r, Job)]
    assert len(jobs) == len(items) - 1
    assert [j.metadata["n"] for j in jobs[:5]] == [0, 1, 2, 4, 5]
    assert jobs[-1].metadata["n"] == len(items) - 1


async def test_sync_submit_many_with_keys_replays(api: Api) -> None:
    key = await api.key("acme")
    items = [item("a", idempotency_key="key-a"), item("b", idempotency_key="key-b")]

    def submit_twice() -> tuple[list[Any], list[Any]]:
        with Client(api.url, key) as client:
            return client.submit_many(items), client.submit_many(iter(items))

    first, second = await asyncio.to_thread(submit_twice)
    assert [j.id for j in first] == [j.id for j in second]
    assert all(isinstance(j, Job) and j.status == "queued" for j in first)


def test_calls_add_a_key_where_missing_and_drop_none() -> None:
    (body,) = list(client_bulk.calls([item("a", priority=None)]))
    assert b'"idempotency_key":"' in body and b"priority" not in body
