"""The durable output log (live output streaming), on SQLite and PostgreSQL alike: appends are
fenced on the lease, numbered in order across attempts, tagged with the attempt's generation,
and wake the job's stream readers."""

from __future__ import annotations

import asyncio

import pytest

from jobgate import errors
from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.postgres.store import is_postgres, postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import is_sqlite, sqlite_store
from jobgate.testing import FakeClock
from jobgate.wakeups import wait_for
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def _running(storage: Storage, clock: FakeClock) -> Job:
    tenant = await make_tenant(storage)
    await submit_one(storage, job=new_job(tenant), now=clock.now())
    (job,) = await storage.job_claim(worker_id="w1", limit=1, lease_ttl_s=60, now=clock.now())
    return job


def _lease(job: Job) -> Lease:
    assert job.lease_token is not None
    return Lease(job.id, job.lease_token)


async def test_chunks_are_numbered_in_order_and_read_after_a_seq(
    storage: Storage, clock: FakeClock
) -> None:
    job = await _running(storage, clock)
    texts = ["Hel", "lo, ", "wörld ✓", ""]
    for text in texts:
        await storage.job_output_append(lease=_lease(job), text=text, now=clock.now())
    chunks = await storage.job_output_read(job_id=job.id)
    assert [(c.seq, c.text) for c in chunks] == list(enumerate(texts, start=1))
    assert {c.generation for c in chunks} == {job.run_count}
    assert [c.seq for c in await storage.job_output_read(job_id=job.id, after_seq=2)] == [3, 4]
    assert [c.seq for c in await storage.job_output_read(job_id=job.id, limit=2)] == [1, 2]
    assert await storage.job_output_read(job_id=job.id, after_seq=4) == []
    assert await storage.job_output_read(job_id="job_missing") == []


async def test_an_append_with_a_stale_token_is_fenced_off(
    storage: Storage, clock: FakeClock
) -> None:
    job = await _running(storage, clock)
    with pytest.raises(errors.LeaseLost):
        await storage.job_output_append(lease=Lease(job.id, "stale"), text="x", now=clock.now())
    with pytest.raises(errors.LeaseLost):
        await storage.job_output_append(lease=Lease("job_nope", "t"), text="x", now=clock.now())
    assert await storage.job_output_read(job_id=job.id) == []


async def test_no_append_after_the_job_finished(storage: Storage, clock: FakeClock) -> None:
    job = await _running(storage, clock)
    await storage.job_output_append(lease=_lease(job), text="all", now=clock.now())
    finish = Finish(
        lease=_lease(job),
        state=JobState.SUCCEEDED,
        actor="w1",
        reason="provider_succeeded",
        result={"ok": True},
    )
    await finish_one(storage, finish=finish, now=clock.now())
    with pytest.raises(errors.LeaseLost):
        await storage.job_output_append(lease=_lease(job), text="late", now=clock.now())
    assert [c.text for c in await storage.job_output_read(job_id=job.id)] == ["all"]


async def test_a_reclaimed_attempt_writes_a_new_generation(
    storage: Storage, clock: FakeClock
) -> None:
    first = await _running(storage, clock)
    await storage.job_output_append(lease=_lease(first), text="first try", now=clock.now())
    await storage.job_reap_expired(limit=10, retry_delay=lambda a: 0, now=clock.advance(61))
    (second,) = await storage.job_claim(
        worker_id="w2", limit=1, lease_ttl_s=60, now=clock.advance(1)
    )
    assert second.id == first.id and second.run_count > first.run_count
    with pytest.raises(errors.LeaseLost):  # the old attempt is fenced off
        await storage.job_output_append(lease=_lease(first), text="zombie", now=clock.now())
    await storage.job_output_append(lease=_lease(second), text="again", now=clock.now())
    chunks = await storage.job_output_read(job_id=first.id)
    assert [(c.seq, c.generation, c.text) for c in chunks] == [
        (1, first.run_count, "first try"),
        (2, second.run_count, "again"),
    ]
    await storage.job_output_append(lease=_lease(second), text=", wörld ✓", now=clock.now())
    # What a status read shows as progress: the current attempt's characters, summed by SQL.
    chars = storage.job_output_chars
    assert await chars(job_id=first.id, generation=first.run_count) == len("first try")
    assert await chars(job_id=first.id, generation=second.run_count) == len("again, wörld ✓")
    assert await chars(job_id=first.id, generation=second.run_count + 1) == 0
    assert await chars(job_id="job_missing", generation=1) == 0


async def test_an_append_wakes_the_stream_readers(storage: Storage, clock: FakeClock) -> None:
    job = await _running(storage, clock)
    with storage.changes.watch_stream(job.id) as watch:
        await storage.job_output_append(lease=_lease(job), text="x", now=clock.now())
        assert watch.changed.is_set() and watch.take() == (False, True)
        storage.changes.jobs_changed([job.id])
        assert watch.take() == (True, False)
    assert storage.changes.stream_watch_count == 0 and storage.changes.job_watch_count == 0


async def test_other_processes_hear_of_appends(storage: Storage, clock: FakeClock) -> None:
    """Another process's reader wakes: by NOTIFY on PostgreSQL, by data_version polling
    (about a second) on SQLite."""
    other: Storage
    if is_postgres(storage):
        other = postgres_store(storage.engine.listen_dsn, pool_size=1)  # direct, not pooled
    else:
        assert is_sqlite(storage)
        other = sqlite_store(storage.engine.path, clock=clock)
    await other.open()
    try:
        await other.listen()
        job = await _running(storage, clock)
        await asyncio.sleep(0.05)  # let SQLite's watcher take its first reading
        with other.changes.watch_stream(job.id) as watch:
            await storage.job_output_append(lease=_lease(job), text="x")
            assert await wait_for(watch.changed, 5.0)
            assert watch.take()[1]
        (chunk,) = await other.job_output_read(job_id=job.id)
        assert chunk.text == "x"
    finally:
        await other.close()


async def test_appends_of_concurrent_jobs_stay_apart(storage: Storage, clock: FakeClock) -> None:
    tenant = await make_tenant(storage)
    for _ in range(3):
        await submit_one(storage, job=new_job(tenant), now=clock.now())
    jobs = await storage.job_claim(worker_id="w1", limit=3, lease_ttl_s=60, now=clock.now())

    async def write(job: Job) -> None:
        for n in range(5):
            await storage.job_output_append(lease=_lease(job), text=f"{job.id}:{n}")

    await asyncio.gather(*(write(job) for job in jobs))
    for job in jobs:
        chunks = await storage.job_output_read(job_id=job.id)
        assert [c.text for c in chunks] == [f"{job.id}:{n}" for n in range(5)]
        assert [c.seq for c in chunks] == [1, 2, 3, 4, 5]


async def test_purging_a_job_drops_its_output(storage: Storage, clock: FakeClock) -> None:
    job = await _running(storage, clock)
    await storage.job_output_append(lease=_lease(job), text="secret answer", now=clock.now())
    finish = Finish(
        lease=_lease(job), state=JobState.SUCCEEDED, reason="provider_succeeded", result={}
    )
    await finish_one(storage, finish=finish, now=clock.now())
    await storage.job_purge(job_id=job.id, tenant_id=job.tenant_id, now=clock.now())
    assert await storage.job_output_read(job_id=job.id) == []


async def test_retention_drops_the_output_with_the_result(
    storage: Storage, clock: FakeClock
) -> None:
    job = await _running(storage, clock)
    await storage.job_output_append(lease=_lease(job), text="old answer", now=clock.now())
    finish = Finish(
        lease=_lease(job), state=JobState.SUCCEEDED, reason="provider_succeeded", result={}
    )
    await finish_one(storage, finish=finish, now=clock.now())
    later = clock.advance(3600)
    purged = await storage.job_purge_expired(completed_before=later, limit=10, now=later)
    assert purged == 1
    assert await storage.job_output_read(job_id=job.id) == []


async def test_no_append_after_the_job_was_purged(storage: Storage, clock: FakeClock) -> None:
    """DELETE /v1/jobs/{id} cancels a running job and purges it at once, while its worker may
    still be streaming: the purge is a fence, like a lost lease, so nothing is stored after
    it."""
    job = await _running(storage, clock)
    await storage.job_output_append(lease=_lease(job), text="before", now=clock.now())
    await storage.job_cancel(job_id=job.id, tenant_id=job.tenant_id, actor="api:delete")
    await storage.job_purge(job_id=job.id, tenant_id=job.tenant_id, now=clock.now())
    with pytest.raises(errors.LeaseLost):
        await storage.job_output_append(lease=_lease(job), text="after", now=clock.now())
    assert await storage.job_output_read(job_id=job.id) == []


async def test_no_append_after_a_bulk_delete(storage: Storage, clock: FakeClock) -> None:
    job = await _running(storage, clock)
    await storage.job_output_append(lease=_lease(job), text="before", now=clock.now())
    await storage.job_bulk_apply(
        where=JobFilter(tenant_id=job.tenant_id),
        action=BulkAction.DELETE,
        actor="api:bulk",
        reason="bulk_delete",
        after_id=None,
        limit=10,
        now=clock.now(),
    )
    with pytest.raises(errors.LeaseLost):
        await storage.job_output_append(lease=_lease(job), text="after", now=clock.now())
    assert await storage.job_output_read(job_id=job.id) == []


TEXT_THE_COLUMN_REFUSES = [
    "\x00",
    "a\x00b",
    "\x00\x00 twice",
    "\uffff",  # the escape character itself
    "\uffff0 looks escaped",
    "\uffff\x00\uffff\uffff",
    "plain, wörld ✓",
]


@pytest.mark.parametrize("text", TEXT_THE_COLUMN_REFUSES)
async def test_any_text_a_provider_sends_is_stored_exactly(
    storage: Storage, clock: FakeClock, text: str
) -> None:
    """PostgreSQL's text cannot hold U+0000 (a model may emit it): it is stored escaped, on
    both stores alike, and read back as it was sent."""
    job = await _running(storage, clock)
    written = await storage.job_output_append(lease=_lease(job), text=text, now=clock.now())
    assert written.text == text
    (chunk,) = await storage.job_output_read(job_id=job.id)
    assert chunk.text == text


async def test_a_result_holding_any_text_is_stored_exactly(
    storage: Storage, clock: FakeClock
) -> None:
    """The same for the answer itself (PostgreSQL's jsonb refuses U+0000 too)."""
    job = await _running(storage, clock)
    text = "a\x00b \uffff0 \uffff\x00"
    result = {"choices": [{"message": {"content": text}}], "odd \x00 key": [text, 1, None]}
    finish = Finish(
        lease=_lease(job), state=JobState.SUCCEEDED, reason="provider_succeeded", result=result
    )
    done = await finish_one(storage, finish=finish, now=clock.now())
    assert done.state is JobState.SUCCEEDED and done.result == result
    stored = await storage.job_get(job_id=job.id)
    assert stored is not None and stored.result == result
