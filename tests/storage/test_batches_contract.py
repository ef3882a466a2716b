"""The files and batches store on SQLite and PostgreSQL alike: a file's chunks go with it, a
batch's lines are recorded once each, and an update applies only from the statuses named."""

from __future__ import annotations

import dataclasses

import pytest

from jobgate import errors
from jobgate.storage.protocol import Storage
from jobgate.storage.records import (
    BatchChunk,
    BatchEnding,
    FileChunk,
    NewBatchItem,
    ResultFile,
)
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job
from tests.storage.webhook_helpers import make_endpoint

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
        },
        now=clock.now(),
    )
    assert batch is not None and batch.status == "validating" and batch.metadata == {"team": "a"}
    assert batch.total == 6  # the file's lines
    (claimed,) = await storage.batch_claim_live(limit=8, lease_s=60, now=clock.now())
    assert claimed.lease_token is not None
    token = claimed.lease_token
    unheld = BatchChunk("batch_1", token, [new_job(acme)], [], 1)
    assert await storage.batch_chunk_insert(chunk=unheld) is None  # validating: nothing stored
    assert await storage.job_list(tenant_id=acme.id, limit=10) == []
    await storage.batch_update(
        batch_id="batch_1", from_statuses=["validating"], status="in_progress", lease_token=token
    )
    job = new_job(acme)
    refused = {"code": "invalid_line", "message": "not JSON"}
    lines = [
        NewBatchItem(line=0, custom_id="a", job_id=job.id),
        NewBatchItem(line=1, custom_id="b", job_id=None, error=refused),
    ]
    stale = BatchChunk("batch_1", "another pass's token", [job], lines, 1)
    assert await storage.batch_chunk_insert(chunk=stale) is None
    moved = await storage.batch_chunk_insert(chunk=BatchChunk("batch_1", token, [job], lines, 1))
    assert moved is not None and moved.expanded_chunks == 1
    more = BatchChunk("batch_1", token, [], [NewBatchItem(2, "c", None)], 2)
    assert await storage.batch_chunk_insert(chunk=more) is not None
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
    cancelled = await storage.batch_update(
        batch_id="batch_1",
        from_statuses=["in_progress"],
        status="cancelling",
        final_status="cancelled",
        unsettled=True,
    )
    assert cancelled is not None
    late = BatchChunk("batch_1", token, [new_job(acme)], [NewBatchItem(3, "d", None)], 3)
    assert await storage.batch_chunk_insert(chunk=late) is None  # cancelled: nothing more
    assert len(await storage.job_list(tenant_id=acme.id, limit=10)) == 1
    expiring = await storage.batch_update(
        batch_id="batch_1", from_statuses=["cancelling"], final_status="expired"
    )
    assert expiring is not None and expiring.final_status == "cancelled"  # the first one stays
    again = await storage.batch_update(
        batch_id="batch_1", from_statuses=["cancelling"], status="cancelling", unsettled=True
    )
    assert again is None  # settled already
    released = await storage.batch_update(
        batch_id="batch_1", from_statuses=["cancelling"], lease_token="stale", release=True
    )
    assert released is None
    released = await storage.batch_update(
        batch_id="batch_1", from_statuses=["cancelling"], lease_token=token, release=True
    )
    assert released is not None and released.lease_token is None


async def test_a_batch_ends_with_its_new_files_shown_and_the_unfinished_ones_dropped(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage)
    await stored_file(storage, acme.id)
    await storage.batch_create(
        batch={
            "id": "batch_1", "tenant_id": acme.id, "endpoint": "/v1/chat/completions",
            "input_file_id": "file_1", "completion_window": "24h", "window_s": 86400,
            "metadata": None, "priority": 0,
        },
        now=clock.now(),
    )  # fmt: skip
    endpoint = await make_endpoint(storage, acme, clock)
    (claimed,) = await storage.batch_claim_live(limit=8, lease_s=60, now=clock.now())
    token = claimed.lease_token
    assert token is not None
    await storage.batch_update(
        batch_id="batch_1",
        from_statuses=["validating"],
        status="finalizing",
        final_status="completed",
        lease_token=token,
    )
    for file_id in ("file_dead", "file_out", "file_err"):  # a dead pass's, then this pass's
        assert await storage.file_create(
            file_id=file_id, tenant_id=acme.id, purpose="batch_output", filename="o",
            batch_id="batch_1", lease_token=token,
        )  # fmt: skip
        chunk = FileChunk(seq=0, first_line=1, line_count=1, data=b"{}\n")
        assert await storage.file_chunk_put(file_id=file_id, chunk=chunk, lease_token=token)
    assert not await storage.file_create(
        file_id="file_stale", tenant_id=acme.id, purpose="batch_output", filename="o",
        batch_id="batch_1", lease_token="stale",
    )  # fmt: skip
    chunk = FileChunk(seq=1, first_line=2, line_count=1, data=b"{}\n")
    assert not await storage.file_chunk_put(file_id="file_out", chunk=chunk, lease_token="stale")
    assert await storage.file_get(file_id="file_out") is None  # invisible while written
    ending = BatchEnding(
        batch_id="batch_1", tenant_id=acme.id, lease_token=token, status="completed",
        completed_count=1, failed_count=1,
        output=ResultFile("file_out", 3, 1), error=ResultFile("file_err", 3, 1),
    )  # fmt: skip
    stale = dataclasses.replace(ending, lease_token="stale")
    assert await storage.batch_finish(ending=stale, now=clock.now()) is None
    done = await storage.batch_finish(ending=ending, now=clock.now())
    assert done is not None and done.status == "completed" and done.completed_at == clock.now()
    assert (done.output_file_id, done.error_file_id, done.lease_token) == (
        "file_out",
        "file_err",
        None,
    )
    shown = await storage.file_get(file_id="file_out")
    assert shown is not None and (shown.bytes, shown.lines, shown.status) == (3, 1, "processed")
    assert await storage.file_get(file_id="file_err") is not None
    assert await storage.file_chunks(file_id="file_dead", from_seq=0, limit=10) == []
    assert not await storage.file_delete(file_id="file_dead")
    assert await storage.batch_finish(ending=ending, now=clock.now()) is None  # ended once
    outbox = await storage.outbox_for_job(job_id="batch_1")
    assert [(e.event_type, e.endpoint_id) for e in outbox] == [("batch.completed", endpoint.id)]


async def test_a_file_a_live_batch_reads_is_not_deleted(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage)
    other = await make_tenant(storage, "other")
    await stored_file(storage, acme.id)
    batch = {
        "id": "batch_1", "tenant_id": acme.id, "endpoint": "/v1/chat/completions",
        "input_file_id": "file_1", "completion_window": "24h", "window_s": 86400,
        "metadata": None, "priority": 0,
    }  # fmt: skip
    assert await storage.batch_create(batch={**batch, "tenant_id": other.id}) is None
    assert await storage.batch_create(batch=batch, now=clock.now()) is not None
    assert not await storage.file_delete(file_id="file_1", tenant_id=other.id)  # not theirs
    with pytest.raises(errors.Conflict, match="batch_1"):
        await storage.file_delete(file_id="file_1", tenant_id=acme.id)
    assert await storage.file_get(file_id="file_1") is not None
    await storage.batch_update(
        batch_id="batch_1", from_statuses=["validating"], status="cancelled"
    )  # ended: the file may go
    assert await storage.file_delete(file_id="file_1", tenant_id=acme.id)
    assert await storage.batch_create(batch={**batch, "id": "batch_2"}) is None  # file gone
