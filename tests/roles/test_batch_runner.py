"""The batches role's expansion under crashes, on both backends: a pass that dies
after storing jobs but before recording them, or before moving its cursor, neither loses nor
doubles a line when the next pass redoes the chunk."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from jobgate import errors, failpoints
from jobgate.process.runtime import Runtime
from jobgate.roles import batch_runner
from jobgate.roles.batch_runner import BatchRunner
from jobgate.services import files
from jobgate.services.batches import BatchService
from jobgate.services.files import FileService
from jobgate.services.jobs import SubmitSpec
from tests.storage.helpers import queued

CHAT = "/v1/chat/completions"


async def chunks_of(lines: list[bytes]) -> Any:
    for raw in lines:
        yield raw


async def make_batch(runtime: Runtime, tenant_id: str, count: int) -> str:
    lines = [
        {
            "custom_id": f"c{i}", "method": "POST", "url": CHAT,
            "body": {"model": "sim-echo", "messages": [{"role": "user", "content": f"n{i}"}]},
        }
        for i in range(count)
    ]  # fmt: skip
    return await make_batch_of(runtime, tenant_id, CHAT, lines)


async def make_batch_of(
    runtime: Runtime, tenant_id: str, endpoint: str, lines: list[dict[str, Any]]
) -> str:
    """A batch of `lines` (uploaded as a JSONL file), created for `endpoint`."""
    data = [orjson.dumps(line) + b"\n" for line in lines]
    service = FileService(storage=runtime.storage, settings=runtime.settings, ids=runtime.ids)
    record = await service.upload(
        tenant_id=tenant_id, purpose=lambda: "batch", filename="in.jsonl", data=chunks_of(data)
    )
    batches = BatchService(storage=runtime.storage, settings=runtime.settings, ids=runtime.ids)
    batch = await batches.create(
        tenant_id=tenant_id,
        input_file_id=record.id,
        endpoint=endpoint,
        completion_window="24h",
        metadata=None,
    )
    return batch.id


@pytest.fixture
def failpoint() -> Iterator[None]:
    yield
    failpoints.arm("")


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "CHUNK_BYTES", 400)  # a few lines a chunk
    monkeypatch.setattr(batch_runner, "CHUNKS_PER_PASS", 1)


async def expand_all(runner: BatchRunner, storage: Any, batch_id: str) -> None:
    for _ in range(100):
        await runner.batches_once()
        batch = await storage.batch_get(batch_id=batch_id)
        counts = await storage.batch_counts(batch_id=batch_id)
        if counts.items == batch.total:
            return
    raise AssertionError("expansion did not finish")


async def test_expansion_is_chunked_and_counts_are_live(
    runtime: Runtime, small_chunks: None
) -> None:
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch(runtime, tenant.tenant.id, 20)
    runner = runtime.batch_runner()
    await runner.batches_once()  # validated: every line checked, none expanded yet
    assert (await runtime.storage.batch_counts(batch_id=batch_id)).items == 0
    await runner.batches_once()
    first = await runtime.storage.batch_counts(batch_id=batch_id)
    assert 0 < first.items < 20 and first.live == first.items
    await expand_all(runner, runtime.storage, batch_id)
    await runtime.worker().run_once(limit=5)
    counts = await runtime.storage.batch_counts(batch_id=batch_id)
    assert (counts.items, counts.completed, counts.live) == (20, 5, 15)


async def test_a_crash_inside_a_chunk_neither_loses_nor_doubles(
    runtime: Runtime, small_chunks: None, failpoint: None
) -> None:
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch(runtime, tenant.tenant.id, 20)
    runner = runtime.batch_runner()
    await runner.batches_once()  # validated
    # The pass dies on the second chunk, its jobs written but not its lines: all rolled back.
    failpoints.arm("batch_chunk_jobs_stored=error@2")
    await runner.batches_once()
    await runner.batches_once()
    failpoints.arm("")
    assert (await runtime.storage.batch_counts(batch_id=batch_id)).items == len(
        await runtime.storage.job_list(tenant_id=tenant.tenant.id, limit=100)
    )
    await expand_all(runner, runtime.storage, batch_id)
    jobs = await runtime.storage.job_list(tenant_id=tenant.tenant.id, limit=100)
    assert len(jobs) == 20
    assert sorted(job.metadata["custom_id"] for job in jobs) == sorted(f"c{i}" for i in range(20))


async def test_a_chunk_whose_commit_reply_was_lost_is_not_stored_twice(
    runtime: Runtime, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch(runtime, tenant.tenant.id, 20)
    runner = runtime.batch_runner()
    real_insert = runtime.storage.batch_chunk_insert
    calls = 0

    async def reply_lost(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        stored = await real_insert(**kwargs)
        if calls == 2:  # committed, but the answer never came back
            raise errors.StorageUnavailable("connection reset")
        return stored

    monkeypatch.setattr(runtime.storage, "batch_chunk_insert", reply_lost)
    for _ in range(3):
        with contextlib.suppress(errors.StorageUnavailable):
            await runner.batches_once()
    monkeypatch.undo()
    await expand_all(runner, runtime.storage, batch_id)
    jobs = await runtime.storage.job_list(tenant_id=tenant.tenant.id, limit=100)
    assert len(jobs) == 20
    assert (await runtime.storage.batch_counts(batch_id=batch_id)).items == 20


async def test_interactive_work_runs_before_a_big_batch(runtime: Runtime) -> None:
    """Another tenant's interactive jobs share the claims fairly with a 300-line batch, and the
    batch's own tenant's interactive jobs go first within that tenant (priority 5 < 8)."""
    big = await runtime.tenants.create("bulk")
    other = await runtime.tenants.create("other")
    batch_id = await make_batch(runtime, big.tenant.id, 300)
    await expand_all(runtime.batch_runner(), runtime.storage, batch_id)
    hello = {"model": "sim-echo", "messages": [{"role": "user", "content": "now"}]}
    mine = [
        (await runtime.jobs.submit(tenant_id=big.tenant.id, spec=spec)).job.id
        for spec in [SubmitSpec(endpoint=CHAT, body=hello)] * 3
    ]
    theirs = [
        (await runtime.jobs.submit(tenant_id=other.tenant.id, spec=spec)).job.id
        for spec in [SubmitSpec(endpoint=CHAT, body=hello)] * 3
    ]
    claimed = await runtime.storage.job_claim(worker_id="w", limit=6, lease_ttl_s=60)
    ids = {job.id for job in claimed}
    assert set(theirs) <= ids  # the other tenant's share is not eaten by the batch
    assert set(mine) <= ids  # within the batch's tenant, interactive work first


async def test_a_chunk_of_more_lines_than_one_bulk_call_expands_whole(runtime: Runtime) -> None:
    tenant = await runtime.tenants.create("acme")
    batch_id = await make_batch(runtime, tenant.tenant.id, 1500)  # one 256 KiB chunk
    chunks = await runtime.storage.file_chunks(
        file_id=(await runtime.storage.batch_get(batch_id=batch_id)).input_file_id,  # type: ignore[union-attr]
        from_seq=0,
        limit=10,
    )
    assert chunks[0].line_count > 1000
    await expand_all(runtime.batch_runner(), runtime.storage, batch_id)
    assert await queued(runtime.storage, tenant.tenant.id) == 1500


async def test_a_batch_that_cannot_be_handled_fails_alone(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await runtime.tenants.create("acme")
    broken = await make_batch(runtime, tenant.tenant.id, 2)
    runner = runtime.batch_runner()

    async def boom(*_args: Any, **_kwargs: Any) -> bool:
        raise ValueError("unexpected")

    await runner.batches_once()  # validated
    monkeypatch.setattr(runner, "_expand", boom)
    for _ in range(batch_runner.MAX_FAILED_PASSES - 1):
        await runner.batches_once()
        retried = await runtime.storage.batch_get(batch_id=broken)
        assert retried is not None and retried.status == "in_progress"
    await runner.batches_once()
    failed = await runtime.storage.batch_get(batch_id=broken)
    assert failed is not None and failed.status == "failed" and failed.failed_at is not None
    message = (
        f"the batch could not be processed (ValueError, {batch_runner.MAX_FAILED_PASSES} attempts)"
    )
    assert failed.errors == {
        "object": "list",
        "data": [
            {"code": "batch_processing_failed", "message": message, "param": None, "line": None}
        ],
    }
    assert await runner.batches_once() == 0  # not taken again
