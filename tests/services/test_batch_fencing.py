"""The batches role's lease is a fence, on both backends: a pass that outlived its lease (while
another process took the batch over) writes nothing, not even its release; a cancel the API
accepted wins over a pass that found every line done; and the jobs of a chunk exist only with
their lines recorded, so a cancel reaches every job a batch created."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import orjson
import pytest

from jobgate import errors, failpoints
from jobgate.process.runtime import Runtime
from jobgate.roles.batch_runner import BatchRunner
from jobgate.services.batches import BatchService
from jobgate.storage.records import BatchRecord
from jobgate.testing import FakeClock
from tests.roles.test_batch_runner import make_batch, small_chunks

__all__ = ["small_chunks"]  # a fixture

LEASE_S = 61.0  # past the runner's lease (the settings' lease_ttl_s, 60 s)


def batches(runtime: Runtime) -> BatchService:
    return BatchService(storage=runtime.storage, settings=runtime.settings, ids=runtime.ids)


async def run_until(runner: BatchRunner, runtime: Runtime, batch_id: str, status: str) -> None:
    for _ in range(20):
        await runner.batches_once()
        await runtime.worker().run_once(limit=50)
        batch = await runtime.storage.batch_get(batch_id=batch_id)
        assert batch is not None
        if batch.status == status:
            return
    raise AssertionError(f"batch {batch_id} never reached {status}")


async def output_lines(runtime: Runtime, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    assert await runtime.storage.file_get(file_id=file_id) is not None, "the file is gone"
    chunks = await runtime.storage.file_chunks(file_id=file_id, from_seq=0, limit=100)
    return [orjson.loads(raw) for chunk in chunks for raw in chunk.data.splitlines()]


async def claimed_alone(runtime: Runtime, clock: FakeClock) -> BatchRecord:
    (claimed,) = await runtime.storage.batch_claim_live(limit=8, lease_s=60, now=clock.now())
    return claimed


async def test_a_stale_finalizing_pass_leaves_the_completed_batch_and_its_file_whole(
    runtime: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    batch_id = await make_batch(runtime, tenant.id, 3)
    runner = runtime.batch_runner()
    for _ in range(2):  # validated, expanded
        await runner.batches_once(now=clock.now())
    await runtime.worker().run_once(limit=10)
    # As if a pass had died right after moving the batch to finalizing.
    await runtime.storage.batch_update(
        batch_id=batch_id,
        from_statuses=("in_progress",),
        status="finalizing",
        final_status="completed",
    )
    stale = await claimed_alone(runtime, clock)  # pass A leases it, then stalls
    clock.advance(LEASE_S)
    await runner.batches_once(now=clock.now())  # pass B: the lease ran out, B finishes it
    done = await runtime.storage.batch_get(batch_id=batch_id)
    assert done is not None and done.status == "completed"
    before = await output_lines(runtime, done.output_file_id)
    assert len(before) == 3

    async def dies(**_kwargs: Any) -> None:
        raise errors.StorageUnavailable("killed while writing")

    monkeypatch.setattr(runtime.storage, "file_chunk_put", dies)
    with contextlib.suppress(Exception):  # pass A wakes up and carries on (then dies)
        await runner.step(stale, now=clock.now())
    monkeypatch.undo()
    after = await runtime.storage.batch_get(batch_id=batch_id)
    assert after == done
    assert await output_lines(runtime, after.output_file_id) == before


async def test_a_stale_pass_does_not_release_the_lease_another_pass_holds(
    runtime: Runtime, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    await make_batch(runtime, tenant.id, 3)
    runner = runtime.batch_runner()
    start = clock.now()

    async def outlives_its_lease(batch: BatchRecord, *, now: Any = None) -> None:
        taken = await runtime.storage.batch_claim_live(
            limit=8, lease_s=60, now=start + timedelta(seconds=LEASE_S)
        )  # meanwhile pass B takes the batch over
        assert [b.id for b in taken] == [batch.id]

    monkeypatch.setattr(runner, "step", outlives_its_lease)
    await runner.batches_once(now=start)  # pass A ends: its release must not drop B's lease
    assert (
        await runtime.storage.batch_claim_live(
            limit=8, lease_s=60, now=start + timedelta(seconds=LEASE_S + 1)
        )
        == []
    )


async def test_a_stale_expanding_pass_writes_nothing(
    runtime: Runtime, clock: FakeClock, small_chunks: None
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    batch_id = await make_batch(runtime, tenant.id, 20)  # a few lines to a chunk
    runner = runtime.batch_runner()
    for _ in range(2):
        await runner.batches_once(now=clock.now())
    stale = await claimed_alone(runtime, clock)  # pass A leases it at chunk N, then stalls
    assert stale.status == "in_progress" and stale.expanded_chunks >= 1
    for _ in range(2):  # its lease runs out; other passes expand chunks N and N + 1
        clock.advance(LEASE_S)
        await runner.batches_once(now=clock.now())
    moved = await runtime.storage.batch_get(batch_id=batch_id)
    assert moved is not None and moved.expanded_chunks == stale.expanded_chunks + 2
    jobs_before = await runtime.storage.job_list(tenant_id=tenant.id, limit=50)
    await runner.step(stale, now=clock.now())  # pass A wakes up and expands chunk N again
    assert await runtime.storage.batch_get(batch_id=batch_id) == moved
    assert await runtime.storage.job_list(tenant_id=tenant.id, limit=50) == jobs_before


async def test_an_accepted_cancel_wins_over_a_pass_that_found_every_line_done(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    batch_id = await make_batch(runtime, tenant.id, 3)
    runner = runtime.batch_runner()
    await runner.batches_once()
    await runner.batches_once()
    await runtime.worker().run_once(limit=10)
    real_live = runtime.storage.batch_live_job_ids
    answered: list[str] = []

    async def cancelled_meanwhile(**kwargs: Any) -> Any:
        live = await real_live(**kwargs)  # every line done: the pass will finalize...
        if not answered:
            cancelled = await batches(runtime).cancel(tenant_id=tenant.id, batch_id=batch_id)
            answered.append(cancelled.status)  # ...but the client's cancel commits first
        return live

    monkeypatch.setattr(runtime.storage, "batch_live_job_ids", cancelled_meanwhile)
    await runner.batches_once()
    monkeypatch.undo()
    assert answered[:1] == ["cancelling"]
    for _ in range(3):
        await runner.batches_once()
    ended = await runtime.storage.batch_get(batch_id=batch_id)
    assert ended is not None and ended.status == "cancelled"
    again = await batches(runtime).cancel(tenant_id=tenant.id, batch_id=batch_id)  # no 409
    assert again.status == "cancelled"


@pytest.fixture
def failpoint() -> Iterator[None]:
    yield
    failpoints.arm("")


async def test_a_cancel_reaches_the_jobs_of_a_chunk_whose_pass_died_mid_way(
    runtime: Runtime, failpoint: None
) -> None:
    """The pass dies after the chunk's jobs are written and before its lines are: the jobs
    must not outlive the pass (one transaction), so cancelling the batch leaves none to run."""
    tenant = (await runtime.tenants.create("acme")).tenant
    batch_id = await make_batch(runtime, tenant.id, 5)
    runner = runtime.batch_runner()
    failpoints.arm("batch_chunk_jobs_stored=error")
    for _ in range(2):  # validating, then the chunk that dies
        await runner.batches_once()
    failpoints.arm("")
    with contextlib.suppress(errors.Conflict):
        await batches(runtime).cancel(tenant_id=tenant.id, batch_id=batch_id)
    for _ in range(5):
        await runner.batches_once()
    await runtime.worker().run_once(limit=50)
    jobs = await runtime.storage.job_list(tenant_id=tenant.id, limit=50)
    assert [job.state for job in jobs if job.state != "cancelled"] == []
    ended = await runtime.storage.batch_get(batch_id=batch_id)
    assert ended is not None and ended.status == "cancelled"


async def test_no_job_of_a_batch_starts_once_its_cancel_is_answered(runtime: Runtime) -> None:
    """The cancel's answer is the line: its queued jobs are cancelled in the same transaction
    (not by the batches role's next pass, which a worker could beat), running ones asked to
    stop, and a worker claiming right after the answer gets none of them."""
    tenant = (await runtime.tenants.create("acme")).tenant
    batch_id = await make_batch(runtime, tenant.id, 4)
    runner = runtime.batch_runner()
    for _ in range(2):  # validated, expanded: four queued jobs
        await runner.batches_once()
    worker = runtime.worker()
    [running] = await worker.claim(limit=1)
    answered = await batches(runtime).cancel(tenant_id=tenant.id, batch_id=batch_id)
    assert answered.status == "cancelling"
    assert await worker.claim(limit=10) == []  # before any batches pass
    jobs = {job.id: job for job in await runtime.storage.job_list(tenant_id=tenant.id, limit=10)}
    assert sorted(str(job.state) for job in jobs.values()) == ["cancelled"] * 3 + ["running"]
    assert jobs[running.id].cancel_requested_at is not None
    events = await runtime.storage.job_events(job_id=next(j for j in jobs if j != running.id))
    assert [(e.to_state, e.actor) for e in events][-1] == ("cancelled", "batch:cancelled")
