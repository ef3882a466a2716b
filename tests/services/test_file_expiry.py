"""Files expire as OpenAI's do, on both backends: an upload and a batch's result files carry
`expires_at` = created + 30 days (files_expire_after_s); past it a file reads as gone, and the
retention pass deletes it with its chunks, except the input of a batch that has not ended."""

from __future__ import annotations

from datetime import timedelta

from jobgate.process.runtime import Runtime
from jobgate.roles.retention import Retention
from jobgate.services.files import FileService, file_view
from jobgate.testing import FakeClock
from tests.roles.test_batch_runner import chunks_of, make_batch

DAYS_30 = 30 * 86400


async def test_files_expire_and_retention_deletes_them_unless_a_live_batch_reads_them(
    runtime: Runtime, clock: FakeClock
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    files = FileService(storage=runtime.storage, settings=runtime.settings, ids=runtime.ids)
    lone = await files.upload(
        tenant_id=tenant.id,
        purpose=lambda: "batch",
        filename="lone.jsonl",
        data=chunks_of([b'{"custom_id": "a"}\n']),
    )
    assert lone.expires_at is not None
    assert (lone.expires_at - lone.created_at).total_seconds() == DAYS_30
    assert file_view(lone)["expires_at"] == file_view(lone)["created_at"] + DAYS_30
    batch_id = await make_batch(runtime, tenant.id, 2)  # stays live: nothing runs it
    live = await runtime.storage.batch_get(batch_id=batch_id)
    assert live is not None
    retention = Retention(storage=runtime.storage, settings=runtime.settings)

    soon = lone.created_at + timedelta(days=29)
    assert (await retention.sweep_once(now=soon))["files"] == 0
    assert await runtime.storage.file_get(file_id=lone.id, now=soon) is not None

    later = lone.created_at + timedelta(days=30, seconds=1)
    assert await runtime.storage.file_get(file_id=lone.id, now=later) is None  # gone to reads
    listed = await runtime.storage.file_list(
        tenant_id=tenant.id, purpose=None, after=None, limit=10, now=later
    )
    assert listed == []
    assert (await retention.sweep_once(now=later))["files"] == 1  # the live batch's input stays
    assert await runtime.storage.file_chunks(file_id=lone.id, from_seq=0, limit=10) == []
    kept = await runtime.storage.file_chunks(file_id=live.input_file_id, from_seq=0, limit=10)
    assert kept != []
    await runtime.storage.batch_update(
        batch_id=batch_id, from_statuses=("validating",), status="cancelled"
    )
    assert (await retention.sweep_once(now=later))["files"] == 1  # ended: it goes too


async def test_a_batchs_result_files_expire_thirty_days_after_they_are_written(
    runtime: Runtime,
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    batch_id = await make_batch(runtime, tenant.id, 2)
    runner = runtime.batch_runner()
    for _ in range(2):
        await runner.batches_once()
    await runtime.worker().run_once(limit=10)
    for _ in range(2):
        await runner.batches_once()
    done = await runtime.storage.batch_get(batch_id=batch_id)
    assert done is not None and done.output_file_id is not None and done.completed_at
    output = await runtime.storage.file_get(file_id=done.output_file_id)
    assert output is not None and output.expires_at is not None
    assert (output.expires_at - output.created_at).total_seconds() == DAYS_30
