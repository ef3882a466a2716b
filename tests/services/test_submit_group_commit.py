"""Group commit of submits (services.submit_group_commit): when batches form and flush, and that
each caller gets the answer it would have had alone. Unit tests over a scripted storage and a clock
that moves only when told; then the real thing on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from jobgate import errors
from jobgate.domain.job import NewJob
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec
from jobgate.services.submit_group_commit import SubmitGroupCommit
from jobgate.storage.records import (
    BulkItem,
    IdempotencyClaim,
    Inserted,
    LimitOverrides,
    QueueLimit,
    SubmitOutcome,
)

pytestmark = pytest.mark.asyncio


class SteppedClock:
    """A clock whose sleeps end only when the test advances it past them."""

    def __init__(self) -> None:
        self._monotonic = 0.0
        self._moved = asyncio.Event()

    def now(self) -> datetime:
        return datetime(2030, 1, 1, tzinfo=UTC)

    def monotonic(self) -> float:
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        until = self._monotonic + seconds
        while self._monotonic < until:
            self._moved.clear()
            await self._moved.wait()

    async def advance(self, seconds: float) -> None:
        self._monotonic += seconds
        self._moved.set()
        await settle()


class ScriptedStore:
    """Records each call; answers with a job per item unless told to refuse; may hold every
    call until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.bulk_error: Exception | None = None
        self.single_errors: dict[str, Exception] = {}
        self.slot_errors: dict[str, errors.IdempotencyKeyReused] = {}

    async def job_insert(
        self,
        *,
        chunks: Iterable[Sequence[NewJob]],
        keys: Sequence[IdempotencyClaim | None] | None = None,
        queue_limit: QueueLimit | None = None,
    ) -> Inserted:
        jobs = [job for chunk in chunks for job in chunk]
        if len(jobs) == 1:
            self.calls.append(("one", [jobs[0].id]))
            await self.release.wait()
            if jobs[0].id in self.single_errors:
                raise self.single_errors[jobs[0].id]
            return Inserted.of([SubmitOutcome(jobs[0], False, 202)])  # type: ignore[arg-type]
        self.calls.append(("bulk", [job.id for job in jobs]))
        await self.release.wait()
        if self.bulk_error is not None:
            raise self.bulk_error
        return Inserted.of(
            [
                self.slot_errors.get(job.id) or SubmitOutcome(job, False, 202)  # type: ignore[arg-type]
                for job in jobs
            ]
        )


def item(job_id: str, tenant_id: str = "ten_a") -> BulkItem:
    job = NewJob(
        id=job_id,
        tenant_id=tenant_id,
        provider="sim",
        endpoint="/v1/chat/completions",
        model="sim-echo",
        request={},
        metadata={},
    )
    return BulkItem(job=job)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def batcher(store: ScriptedStore, clock: Any = None, **kwargs: Any) -> SubmitGroupCommit:
    return SubmitGroupCommit(storage=store, clock=clock or SteppedClock(), **kwargs)


async def test_a_lone_submit_is_inserted_alone_at_once() -> None:
    store = ScriptedStore()
    outcome = await batcher(store).insert(item("j1"), None)
    assert outcome.job.id == "j1"
    assert store.calls == [("one", ["j1"])]


async def test_submits_arriving_together_share_one_transaction() -> None:
    store = ScriptedStore()
    group = batcher(store)
    outcomes = await asyncio.gather(*(group.insert(item(f"j{i}"), None) for i in range(5)))
    assert [o.job.id for o in outcomes] == [f"j{i}" for i in range(5)]
    assert store.calls == [("bulk", [f"j{i}" for i in range(5)])]


async def test_tenants_are_batched_apart() -> None:
    store = ScriptedStore()
    group = batcher(store)
    await asyncio.gather(
        group.insert(item("a1", "ten_a"), None),
        group.insert(item("b1", "ten_b"), None),
        group.insert(item("a2", "ten_a"), None),
    )
    assert sorted(store.calls) == [("bulk", ["a1", "a2"]), ("one", ["b1"])]


async def test_while_every_slot_is_busy_submits_collect_until_one_frees() -> None:
    store = ScriptedStore()
    store.release.clear()
    group = batcher(store, max_in_flight=1)
    first = asyncio.create_task(group.insert(item("j0"), None))
    await settle()
    rest = [asyncio.create_task(group.insert(item(f"j{i}"), None)) for i in (1, 2, 3)]
    await settle()
    assert store.calls == [("one", ["j0"])]  # the three wait for the slot
    store.release.set()
    await asyncio.gather(first, *rest)
    assert store.calls == [("one", ["j0"]), ("bulk", ["j1", "j2", "j3"])]


async def test_a_full_batch_flushes_without_waiting_for_a_slot() -> None:
    store = ScriptedStore()
    store.release.clear()
    group = batcher(store, max_in_flight=1, max_items=3)
    tasks = [asyncio.create_task(group.insert(item("j0"), None))]
    await settle()
    tasks += [asyncio.create_task(group.insert(item(f"j{i}"), None)) for i in (1, 2, 3, 4)]
    await settle()
    assert store.calls == [("one", ["j0"]), ("bulk", ["j1", "j2", "j3"])]
    store.release.set()
    await asyncio.gather(*tasks)
    assert store.calls[-1] == ("one", ["j4"])


async def test_the_window_bounds_the_wait_when_every_slot_stays_busy() -> None:
    store = ScriptedStore()
    store.release.clear()
    clock = SteppedClock()
    group = batcher(store, clock, max_in_flight=1, window_s=0.002)
    tasks = [asyncio.create_task(group.insert(item("j0"), None))]
    await settle()
    tasks.append(asyncio.create_task(group.insert(item("j1"), None)))
    await settle()
    await clock.advance(0.001)
    assert store.calls == [("one", ["j0"])]  # inside the window, the slot still busy
    await clock.advance(0.001)
    assert store.calls == [("one", ["j0"]), ("one", ["j1"])]  # the window is over: flushed
    store.release.set()
    await asyncio.gather(*tasks)


async def test_a_refused_slot_fails_only_its_caller() -> None:
    store = ScriptedStore()
    store.slot_errors["j1"] = errors.IdempotencyKeyReused()
    group = batcher(store)
    results = await asyncio.gather(
        *(group.insert(item(f"j{i}"), None) for i in range(3)), return_exceptions=True
    )
    assert isinstance(results[1], errors.IdempotencyKeyReused)
    assert [r.job.id for r in (results[0], results[2])] == ["j0", "j2"]  # type: ignore[union-attr]


async def test_a_failed_batch_is_retried_submit_by_submit() -> None:
    store = ScriptedStore()
    store.bulk_error = errors.QueueFull("max_queued", 0)
    store.single_errors["j2"] = errors.QueueFull("max_queued", 0)
    group = batcher(store)
    limit = QueueLimit(tenant_max=2)
    results = await asyncio.gather(
        *(group.insert(item(f"j{i}"), limit) for i in range(3)), return_exceptions=True
    )
    assert [type(r).__name__ for r in results] == ["SubmitOutcome", "SubmitOutcome", "QueueFull"]
    assert store.calls[0] == ("bulk", ["j0", "j1", "j2"])
    assert sorted(store.calls[1:]) == [("one", ["j0"]), ("one", ["j1"]), ("one", ["j2"])]


async def test_a_store_answering_out_of_shape_fails_its_callers_instead_of_hanging() -> None:
    store = ScriptedStore()

    async def short(**_kwargs: Any) -> Inserted:
        return Inserted([], [])  # fewer results than items

    store.job_insert = short  # type: ignore[method-assign]
    group = batcher(store)
    results = await asyncio.gather(
        *(group.insert(item(f"j{i}"), None) for i in range(2)), return_exceptions=True
    )
    assert all(isinstance(r, ValueError) for r in results)


async def test_a_caller_that_left_before_the_flush_is_not_stored() -> None:
    store = ScriptedStore()
    store.release.clear()
    group = batcher(store, max_in_flight=1)
    first = asyncio.create_task(group.insert(item("j0"), None))
    await settle()
    leaving = asyncio.create_task(group.insert(item("j1"), None))
    staying = asyncio.create_task(group.insert(item("j2"), None))
    await settle()
    leaving.cancel()
    store.release.set()
    await asyncio.gather(first, staying)
    assert store.calls == [("one", ["j0"]), ("one", ["j2"])]


# -- the real thing, on both backends --------------------------------------------------------


class CountingStore:
    """The runtime's storage, with the batcher's calls counted."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self.calls: list[int] = []

    async def job_insert(self, **kwargs: Any) -> Inserted:
        self.calls.append(sum(len(chunk) for chunk in kwargs["chunks"]))
        inserted: Inserted = await self._storage.job_insert(**kwargs)
        return inserted


def spec(text: str) -> SubmitSpec:
    return SubmitSpec(
        endpoint="/v1/chat/completions",
        body={"model": "sim-echo", "messages": [{"role": "user", "content": text}]},
    )


async def test_concurrent_submits_commit_together_with_keys_and_limits(runtime: Runtime) -> None:
    counting = CountingStore(runtime.storage)
    runtime.jobs.batcher.storage = counting
    tenant = (await runtime.tenants.create("acme")).tenant
    submit = runtime.jobs.submit

    plain = [submit(tenant_id=tenant.id, spec=spec(f"n{i}")) for i in range(12)]
    keyed = [
        submit(tenant_id=tenant.id, spec=spec("same"), idempotency_key="k-1"),
        submit(tenant_id=tenant.id, spec=spec("same"), idempotency_key="k-1"),
        submit(tenant_id=tenant.id, spec=spec("different"), idempotency_key="k-1"),
    ]
    results = await asyncio.gather(*plain, *keyed, return_exceptions=True)
    outcomes = [r for r in results[:12] if isinstance(r, SubmitOutcome)]
    assert len({o.job.id for o in outcomes}) == 12
    # Concurrent submits have no order: whichever body binds the key first, one job is
    # created for it, the same body replays it and the other body is refused.
    keyed_results = results[12:]
    bound = [r for r in keyed_results if isinstance(r, SubmitOutcome)]
    refused = [r for r in keyed_results if isinstance(r, errors.IdempotencyKeyReused)]
    assert len(bound) + len(refused) == 3 and len(bound) in (1, 2)
    assert len({o.job.id for o in bound}) == 1
    assert [o.replayed for o in bound] in ([False], [False, True], [True, False])
    assert len(counting.calls) < 15 and sum(counting.calls) == 15  # shared transactions
    for outcome in [*outcomes, *bound]:
        assert await runtime.storage.job_get(job_id=outcome.job.id) is not None

    # A queue bound crossed inside one group refuses only the submits past it.
    small = (await runtime.tenants.create("small")).tenant
    await runtime.storage.tenant_limits_set(
        tenant_id=small.id, overrides=LimitOverrides(max_queued=3)
    )
    runtime.limits.invalidate()
    results = await asyncio.gather(
        *(submit(tenant_id=small.id, spec=spec(f"s{i}")) for i in range(5)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, SubmitOutcome) for r in results) == 3
    assert sum(isinstance(r, errors.QueueFull) for r in results) == 2
