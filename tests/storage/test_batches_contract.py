"""The files and batches store on SQLite and PostgreSQL alike: a file's chunks go with it, a
batch's lines are recorded once each, and an update applies only from the statuses named."""

from __future__ import annotations

import pytest

from jobgate.storage.protocol import Storage
from jobgate.storage.records import FileChunk, NewBatchItem
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job

pytestmark = pytest.mark.asyncio


async def stored_file(storage: Storage, tenant_id: str, file_id: str = "file_1") -> None:
    await storage.file_create(file_id=file_id, tenant_id=tenant_id, purpose="batch", filename="in")
    for seq in range(3):
        chunk = FileChunk(seq=seq, first_line=seq * 2, line_count=2, data=b"{}\n{}\n")
        await storage.file_chunk_put(file_id=file_id, chunk=chunk)
    await storage.file_finish(file_id=file_id, bytes=18, lines=6)


async def test_a_deleted_file_takes_its_chunks_and_only_its_tenant_deletes_it(
    storage: Storage,
) -> None:
    acme = await make_tenant(storage)
    await stored_file(storage, acme.id)
    assert not await storage.file_delete(file_id="file_1", tenant_id="ten_other")
    assert len(await storage.file_chunks(file_id="file_1", from_seq=0, limit=10)) == 3
    assert await storage.file_delete(file_id="file_1", tenant_id=acme.id)
    assert await storage.file_get(file_id="file_1") is None
    assert await storage.file_chunks(file_id="file_1", from_seq=0, limit=10) == []
    assert not await storage.file_delete(file_id="file_1")


async def test_batch_lines_are_recorded_once_each_and_updates_follow_the_statuses(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    await stored_file(storage, acme.id)
    batch = await storage.batch_create(
        batch={
            "id": "batch_1",
            "tenant_id": acme.id,
            "endpoint": "/v1/chat/completions",
            "input_file_id": "file_1",
            "completion_window": "24h",
            "window_s": 86400,
            "metadata": {"team": "a"},
            "priority": 0,
            "total": 3,
        },
        now=clock.now(),
    )
    assert batch.status == "validating" and batch.metadata == {"team": "a"}
    (job,) = await storage.job_insert_many(jobs=[new_job(acme)], now=clock.now())
    refused = {"code": "invalid_line", "message": "not JSON"}
    lines = [
        NewBatchItem(line=0, custom_id="a", job_id=job.id),
        NewBatchItem(line=1, custom_id="b", job_id=None, error=refused),
    ]
    await storage.batch_items_put(batch_id="batch_1", items=lines)
    await storage.batch_items_put(batch_id="batch_1", items=[NewBatchItem(2, "c", None), *lines])
    page = await storage.batch_items_page(batch_id="batch_1", after_line=-1, limit=10)
    assert [(i.line, i.custom_id, i.job_id, i.item_error) for i in page] == [
        (0, "a", job.id, None),
        (1, "b", None, refused),
        (2, "c", None, None),
    ]
    assert page[0].state == "queued"
    counts = await storage.batch_counts(batch_id="batch_1")
    assert (counts.items, counts.completed, counts.failed, counts.live) == (3, 0, 1, 1)
    assert await storage.batch_live_job_ids(batch_id="batch_1", limit=10) == [job.id]

    unmoved = await storage.batch_update(
        batch_id="batch_1", from_statuses=["in_progress"], status="finalizing"
    )
    assert unmoved is None
    moved = await storage.batch_update(
        batch_id="batch_1",
        from_statuses=["validating", "in_progress"],
        status="in_progress",
        errors={"data": []},
        release=True,
        now=clock.now(),
    )
    assert moved is not None and moved.status == "in_progress"
    assert moved.in_progress_at == clock.now() and moved.errors == {"data": []}
