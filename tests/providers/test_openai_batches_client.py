"""The OpenAI Batch API client against the simulator: find walks the list page by page for a
part's key and stops at batches older than the part; errors are classified as the adapters'."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers import openai_batches
from jobgate.providers.openai_batches import OpenAIBatches
from jobgate.simulator.server import Simulator
from jobgate.testing import FakeClock

pytestmark = pytest.mark.asyncio
LINE = (
    b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", '
    b'"body": {"model": "m", "messages": [{"role": "user", "content": "x"}]}}\n'
)


@pytest.fixture
async def api(clock: FakeClock) -> AsyncIterator[OpenAIBatches]:
    async with Simulator(clock=clock) as simulator:
        config = ProviderConfig(kind="openai", base_url=simulator.openai_base_url)
        client = OpenAIBatches("oa", config, clock=clock)
        yield client
        await client.aclose()


async def test_find_walks_the_pages_and_stops_at_older_batches(
    api: OpenAIBatches, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_batches, "LIST_PAGE", 1)
    file_id = await api.upload(LINE, filename="in.jsonl")
    start = clock.now()
    made = {}
    for key in ("k0", "k1", "k2"):
        made[key] = await api.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", part_key=key
        )
        clock.advance(10)
    for key, batch in made.items():
        found = await api.find(key, since=start)
        assert found is not None and found["id"] == batch["id"]
    assert await api.find("k9", since=start) is None
    later = start + dt.timedelta(seconds=15)  # k0 was made before: not looked for
    assert await api.find("k0", since=later) is None
    assert (await api.find("k2", since=later) or {}).get("id") == made["k2"]["id"]


async def test_errors_are_classified(api: OpenAIBatches) -> None:
    with pytest.raises(errors.ProviderFatal):
        await api.create(input_file_id="file-nope", endpoint="/v1/chat/completions", part_key="k")
    with pytest.raises(errors.ProviderFatal):
        await api.retrieve("batch_nope")
