"""Timing of an enqueue, the same way for every system: one job per call from each number of
concurrent callers, then `batch` jobs per call, in rounds (the best one counts: a batched round
takes a few tenths of a second, so a checkpoint or another process's burst in one of them
decides a single figure; every round is in the note)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator

from bench.results import Case

BATCHED_ROUNDS = 3


def _case(
    system: str,
    backend: str,
    what: str,
    config: dict[str, int],
    jobs: int,
    seconds: float,
    note: str = "",
) -> Case:
    metrics = {"jobs": jobs, "seconds": round(seconds, 3), "jobs_per_s": round(jobs / seconds, 1)}
    return Case("enqueue", system, backend, what, config, metrics, note=note)


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
    """`jobs` single enqueues at each concurrency, then BATCHED_ROUNDS rounds of
    `batched_jobs` (default `jobs`) more in batches of `batch`; the fastest round is the
    batched figure."""
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
    rounds = []
    for _ in range(BATCHED_ROUNDS):
        started = time.monotonic()
        for start in range(0, batched, batch):
            await enqueue_many(min(batch, batched - start))
        rounds.append(time.monotonic() - started)
    note = f"best of {len(rounds)} rounds: " + " / ".join(f"{batched / s:,.0f}" for s in rounds)
    best = min(rounds)
    cases.append(_case(system, backend, "batched", {"batch": batch}, batched, best, note))
    return cases
