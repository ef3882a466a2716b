"""One batch that cannot be processed fails alone, on both backends: the pass goes on to the
other batches (of every tenant), and the bad one, after a few passes that failed on it in a
row, ends `failed` with an error instead of being retried forever."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate import errors
from jobgate.process.runtime import Runtime
from jobgate.roles import batch_runner
from tests.roles.test_batch_runner import make_batch


async def test_a_batch_the_database_refuses_fails_alone_and_the_others_run(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad_tenant = (await runtime.tenants.create("bad")).tenant
    good_tenant = (await runtime.tenants.create("good")).tenant
    bad = await make_batch(runtime, bad_tenant.id, 2)  # older: first in every pass
    good = await make_batch(runtime, good_tenant.id, 2)
    bad_batch = await runtime.storage.batch_get(batch_id=bad)
    assert bad_batch is not None
    real_chunks = runtime.storage.file_chunks

    async def refused(**kwargs: Any) -> Any:
        if kwargs["file_id"] == bad_batch.input_file_id:  # e.g. a value the column refuses
            raise errors.StorageError("postgres: CharacterNotInRepertoireError: ...")
        return await real_chunks(**kwargs)

    monkeypatch.setattr(runtime.storage, "file_chunks", refused)
    runner = runtime.batch_runner()
    await runner.batches_once()
    await runner.batches_once()
    assert (await runtime.storage.batch_counts(batch_id=good)).items == 2  # not held up
    for _ in range(batch_runner.MAX_FAILED_PASSES):
        await runner.batches_once()
    failed = await runtime.storage.batch_get(batch_id=bad)
    assert failed is not None and failed.status == "failed" and failed.errors is not None
    (error,) = failed.errors["data"]
    assert error["code"] == "batch_processing_failed" and "StorageError" in error["message"]
    assert "CharacterNotInRepertoire" not in error["message"]  # no database detail leaks
    await runtime.worker().run_once(limit=10)
    for _ in range(2):
        await runner.batches_once()
    done = await runtime.storage.batch_get(batch_id=good)
    assert done is not None and done.status == "completed"


async def test_a_passing_glitch_does_not_fail_the_batch(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    batch_id = await make_batch(runtime, tenant.id, 2)
    real_chunks = runtime.storage.file_chunks
    calls = 0

    async def glitches_once(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise errors.StorageError("postgres: SerializationError: ...")
        return await real_chunks(**kwargs)

    monkeypatch.setattr(runtime.storage, "file_chunks", glitches_once)
    runner = runtime.batch_runner()
    for _ in range(3):
        await runner.batches_once()
    await runtime.worker().run_once(limit=10)
    for _ in range(2):
        await runner.batches_once()
    done = await runtime.storage.batch_get(batch_id=batch_id)
    assert done is not None and done.status == "completed"
