"""SQLite applies a batch of verdicts set-wise (one UPDATE from a temp table, and one INSERT
for the ledger rows under the same fence); a job named twice in one batch still meets its
verdicts one after the other, as if written singly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobgate import errors
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.records import Finished
from jobgate.storage.sqlite import transactions
from jobgate.storage.sqlite.store import SqliteStore, sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one


async def test_a_job_twice_in_one_batch_meets_its_verdicts_in_order(
    tmp_path: Path, clock: FakeClock
) -> None:
    storage = sqlite_store(str(tmp_path / "jobgate.db"), clock=clock)
    await storage.open()
    await storage.migrate()
    try:
        tenant = await make_tenant(storage)
        for _ in range(2):
            await submit_one(storage, job=new_job(tenant), now=clock.now())
        a, b = await storage.job_claim(worker_id="w", limit=2, lease_ttl_s=30, now=clock.now())
        usage = {"input_tokens": 3, "output_tokens": 1}
        assert a.lease_token is not None and b.lease_token is not None
        results = await storage.job_finish_many(
            finishes=[
                # a: a stale verdict first, then its lease holder's
                Finish(lease=Lease(a.id, "stale"), state=JobState.FAILED, reason="late"),
                Finish(
                    lease=Lease(a.id, a.lease_token),
                    state=JobState.SUCCEEDED,
                    reason="completed",
                    usage=usage,
                ),
                # b: the holder's verdict, then the same one again (its lease is spent)
                Finish(
                    lease=Lease(b.id, b.lease_token),
                    state=JobState.SUCCEEDED,
                    reason="completed",
                    usage=usage,
                ),
                Finish(lease=Lease(b.id, b.lease_token), state=JobState.FAILED, reason="again"),
            ],
            now=clock.now(),
        )
        assert results == [
            None,
            Finished(a.id, JobState.SUCCEEDED, 1),
            Finished(b.id, JobState.SUCCEEDED, 1),
            None,
        ]
        for job in (a, b):
            await _succeeded_once(storage, job.id)
    finally:
        await storage.close()


async def test_a_failed_finish_leaves_no_verdict_for_the_next_one(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdicts are bound into a temp table of the writer's connection: a finish that
    fails takes its verdicts with it, so the next finish of the same lease applies its own,
    once (were the first one's left behind, the join would meet two verdicts for the job)."""
    storage = sqlite_store(str(tmp_path / "jobgate.db"), clock=clock)
    await storage.open()
    await storage.migrate()
    try:
        tenant = await make_tenant(storage)
        await submit_one(storage, job=new_job(tenant), now=clock.now())
        (job,) = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=30, now=clock.now())
        assert job.lease_token is not None
        done = Finish(
            lease=Lease(job.id, job.lease_token),
            state=JobState.SUCCEEDED,
            reason="completed",
            usage={"input_tokens": 3, "output_tokens": 1},
        )

        verdict_row = transactions.verdict_row

        def broken(finish: Finish, json: Any) -> tuple[Any, ...]:
            row = verdict_row(finish, json)
            return (*row[:2], "no such state", *row[3:])  # after the ledger row was billed

        monkeypatch.setattr(transactions, "verdict_row", broken)
        with pytest.raises(errors.StorageError, match="CHECK constraint"):
            await storage.job_finish_many(finishes=[done], now=clock.now())
        monkeypatch.undo()
        held = await storage.job_get(job_id=job.id)
        assert held is not None and held.state is JobState.RUNNING
        assert held.lease_token == job.lease_token

        assert await storage.job_finish_many(finishes=[done], now=clock.now()) == [
            Finished(job.id, JobState.SUCCEEDED, 1)
        ]
        await _succeeded_once(storage, job.id)
    finally:
        await storage.close()


async def test_only_the_verdicts_the_fence_lets_through_are_billed(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The ledger rows are written by one INSERT before the UPDATE: it bills a success with
    usage only where the UPDATE then applies it (the lease token, a running job), with the
    verdict's tokens, cache tokens included, and nothing for a failure with usage."""
    storage = sqlite_store(str(tmp_path / "jobgate.db"), clock=clock)
    await storage.open()
    await storage.migrate()
    try:
        tenant = await make_tenant(storage)
        for _ in range(3):
            await submit_one(storage, job=new_job(tenant), now=clock.now())
        a, b, c = await storage.job_claim(worker_id="w", limit=3, lease_ttl_s=30, now=clock.now())
        assert a.lease_token and b.lease_token and c.lease_token
        usage = {
            "input_tokens": 7,
            "output_tokens": 2,
            "cache_read_input_tokens": 5,
            "cache_creation_input_tokens": 3,
        }
        results = await storage.job_finish_many(
            finishes=[
                Finish(Lease(a.id, "stale"), JobState.SUCCEEDED, "completed", usage=usage),
                Finish(Lease(b.id, b.lease_token), JobState.SUCCEEDED, "completed", usage=usage),
                Finish(Lease(c.id, c.lease_token), JobState.FAILED, "fatal", usage=usage),
            ],
            now=clock.now(),
        )
        assert results == [
            None,
            Finished(b.id, JobState.SUCCEEDED, 1),
            Finished(c.id, JobState.FAILED, 1),
        ]
        assert await storage.usage_for_job(job_id=a.id) == []
        assert await storage.usage_for_job(job_id=c.id) == []
        (row,) = await storage.usage_for_job(job_id=b.id)
        assert (row.kind, row.tenant_id, row.provider, row.model) == (
            "completion",
            b.tenant_id,
            b.provider,
            b.model,
        )
        tokens = (row.input_tokens, row.output_tokens, row.cache_read_tokens)
        assert (*tokens, row.cache_write_tokens) == (7, 2, 5, 3)
        held = await storage.job_get(job_id=a.id)
        assert held is not None and held.state is JobState.RUNNING
    finally:
        await storage.close()


async def _succeeded_once(storage: SqliteStore, job_id: str) -> None:
    """Succeeded, billed once, and its log queued -> running -> succeeded."""
    stored = await storage.job_get(job_id=job_id)
    assert stored is not None and stored.state is JobState.SUCCEEDED
    assert len(await storage.usage_for_job(job_id=job_id)) == 1
    events = await storage.job_events(job_id=job_id)
    assert [e.to_state for e in events] == [JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED]
