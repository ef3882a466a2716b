"""A live batch's request counts for reads, counted at most once per FRESH_S per process.

Counting is a join of every line of the batch with its job (a tenth of a second of
PostgreSQL for a 50,000-line batch), on every `GET /v1/batches/{id}` and for each live batch of
a `GET /v1/batches` page, so a client polling its batches could keep the database busy. The
reads share one count per batch per second; callers that find it stale together wait for one
count. The batches role counts afresh (it decides when a batch is done)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from jobgate.storage.protocol import BatchFilesStorage
from jobgate.storage.records import BatchCounts

FRESH_S = 1.0
_KEPT = 1_000  # batches remembered; past this the stale ones are forgotten


class RecentBatchCounts:
    """`monotonic`: the process's own clock by default (staleness is real time, also where
    the runtime's clock is a test's fake one, as the API-key cache's)."""

    def __init__(
        self, *, storage: BatchFilesStorage, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._storage = storage
        self._monotonic = monotonic
        self._counted: dict[str, tuple[float, BatchCounts]] = {}
        self._counting: dict[str, asyncio.Lock] = {}

    async def of(self, batch_id: str) -> BatchCounts:
        fresh = self._fresh(batch_id)
        if fresh is not None:
            return fresh
        async with self._lock_of(batch_id):
            fresh = self._fresh(batch_id)  # counted while this caller waited
            if fresh is not None:
                return fresh
            counts = await self._storage.batch_counts(batch_id=batch_id)
            self._remember(batch_id, counts)
            return counts

    def _lock_of(self, batch_id: str) -> asyncio.Lock:
        lock = self._counting.get(batch_id)
        if lock is None:
            if len(self._counting) >= _KEPT:  # forget the idle ones
                self._counting = {k: held for k, held in self._counting.items() if held.locked()}
            lock = self._counting[batch_id] = asyncio.Lock()
        return lock

    def _fresh(self, batch_id: str) -> BatchCounts | None:
        counted = self._counted.get(batch_id)
        if counted is not None and self._monotonic() - counted[0] < FRESH_S:
            return counted[1]
        return None

    def _remember(self, batch_id: str, counts: BatchCounts) -> None:
        now = self._monotonic()
        if len(self._counted) >= _KEPT:
            self._counted = {k: v for k, v in self._counted.items() if now - v[0] < FRESH_S}
        self._counted[batch_id] = (now, counts)
