"""Timing of an enqueue, the same way for every system: one job per call from each number of
concurrent callers, then `batch` jobs per call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator

from bench.results import Case


def _case(
    system: str, backend: str, what: str, config: dict[str, int], jobs: int, seconds: float
) -> Case:
    metrics = {"jobs": jobs, "seconds": round(seconds, 3), "jobs_per_s": round(jobs / seconds, 1)}
    return Case("enqueue", system, backend, what, config, metrics)


async def time_enqueues(
    system: str,
    backend: str,
    *,
    jobs: int,
    concurrencies: tuple[int, ...],
    batch: int,
    batched_jobs: int | None = None,
    enqueue_one: Callable[[], Awaitable[object]],
    enqueue_many: Callable[[int], Awaitable[object]],
) -> list[Case]:
    """`jobs` single enqueues at each concurrency, then `batched_jobs` (default `jobs`) more
    in batches of `batch`."""
    cases = []
    for concurrency in concurrencies:
        cursor = iter(range(jobs))

        async def caller(cursor: Iterator[int] = cursor) -> None:
            for _ in cursor:
                await enqueue_one()

        started = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(max(1, min(concurrency, jobs)))))
        seconds = time.monotonic() - started
        cases.append(_case(system, backend, "single", {"concurrency": concurrency}, jobs, seconds))
    batched = jobs if batched_jobs is None else batched_jobs
    started = time.monotonic()
    for start in range(0, batched, batch):
        await enqueue_many(min(batch, batched - start))
    seconds = time.monotonic() - started
    cases.append(_case(system, backend, "batched", {"batch": batch}, batched, seconds))
    return cases
