"""A live batch's request counts are read by every batch GET and list: counting joins every
line with its job (~110 ms at 50,000 lines), so the reads of one process share one count per
batch per second (services.batch_counts)."""

from __future__ import annotations

import asyncio
from typing import Any

from jobgate.services import batch_counts
from jobgate.services.batch_counts import RecentBatchCounts
from jobgate.storage.records import BatchCounts
from jobgate.testing import FakeClock


class CountingStorage:
    def __init__(self) -> None:
        self.counted: list[str] = []
        self.release = asyncio.Event()
        self.release.set()

    async def batch_counts(self, *, batch_id: str) -> BatchCounts:
        self.counted.append(batch_id)
        await self.release.wait()
        return BatchCounts(items=10, completed=len(self.counted), failed=0, live=1)


def recent(storage: CountingStorage, clock: FakeClock) -> RecentBatchCounts:
    fake: Any = storage  # only batch_counts is used
    return RecentBatchCounts(storage=fake, monotonic=clock.monotonic)


async def test_reads_within_a_second_share_one_count(clock: FakeClock) -> None:
    storage = CountingStorage()
    counts = recent(storage, clock)
    first = await counts.of("batch_a")
    clock.advance(batch_counts.FRESH_S / 2)
    assert await counts.of("batch_a") == first
    await counts.of("batch_b")  # another batch is its own count
    assert storage.counted == ["batch_a", "batch_b"]
    clock.advance(batch_counts.FRESH_S / 2)
    assert (await counts.of("batch_a")).completed == 3  # a second old: counted again
    assert storage.counted == ["batch_a", "batch_b", "batch_a"]


async def test_readers_arriving_together_wait_for_one_count(clock: FakeClock) -> None:
    storage = CountingStorage()
    storage.release.clear()
    counts = recent(storage, clock)
    reads = [asyncio.create_task(counts.of("batch_a")) for _ in range(20)]
    for _ in range(50):  # every read as far as it can go (loop turns, not time)
        await asyncio.sleep(0)
    storage.release.set()
    assert {read.completed for read in await asyncio.gather(*reads)} == {1}
    assert storage.counted == ["batch_a"]
