"""job_insert given its chunks lazily (the batched enqueue far from every queue bound), on
SQLite and PostgreSQL alike: the jobs of every chunk in one transaction, all of them or none,
answered in order; an exception raised while a chunk is made rolls back what was inserted. On
PostgreSQL each chunk is sent before the next one is made (the pipelining it exists for)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence

import asyncpg
import pytest

from jobgate import errors
from jobgate.domain.job import NewJob
from jobgate.domain.states import JobState
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_streamed, make_tenant, new_job, queued, submit_one

pytestmark = pytest.mark.asyncio


class Refused(Exception):
    """What making a chunk raises in these tests (as prepare raises InvalidRequest)."""


def _chunks(tenant: Tenant, sizes: Sequence[int]) -> list[list[NewJob]]:
    return [[new_job(tenant, metadata={"chunk": c}) for _ in range(n)] for c, n in enumerate(sizes)]


async def test_every_chunk_is_stored_in_order_with_first_events(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    chunks = _chunks(tenant, [2, 5, 1, 4])
    stored = await insert_streamed(storage, chunks=iter(chunks), now=clock.now())
    assert [job.id for job in stored] == [job.id for chunk in chunks for job in chunk]
    assert [job.metadata["chunk"] for job in stored] == [0, 0, 1, 1, 1, 1, 1, 2, 3, 3, 3, 3]
    assert all(job.state is JobState.QUEUED for job in stored)
    for job in stored:
        assert stored[0].created_at == job.created_at  # one transaction, one clock
        (event,) = await storage.job_events(job_id=job.id)
        assert (event.from_state, event.to_state) == (None, JobState.QUEUED)
        assert await storage.job_get(job_id=job.id) == job


async def test_no_chunks_store_nothing(storage: Storage) -> None:
    assert await insert_streamed(storage, chunks=iter([])) == []
    assert await insert_streamed(storage, chunks=iter([[], []])) == []


async def test_a_chunk_that_cannot_be_made_rolls_back_the_chunks_before_it(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    chunks = _chunks(tenant, [3, 3])

    def made() -> Iterator[list[NewJob]]:
        yield from chunks
        raise Refused("item 7: body.model must be a string")

    with pytest.raises(Refused):
        await insert_streamed(storage, chunks=made(), now=clock.now())
    assert await queued(storage, tenant.id) == 0
    # The connection is usable afterwards: the next batch goes through.
    assert len(await insert_streamed(storage, chunks=iter(chunks), now=clock.now())) == 6


async def test_a_duplicate_id_in_a_later_chunk_stores_none_of_the_batch(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    first = new_job(tenant)
    await submit_one(storage, job=first, now=clock.now())
    chunks = [[new_job(tenant)], [new_job(tenant), first], [new_job(tenant)]]
    with pytest.raises(errors.StorageError):
        await insert_streamed(storage, chunks=iter(chunks), now=clock.now())
    assert await queued(storage, tenant.id) == 1


@pytest.mark.postgres
async def test_each_chunk_is_in_the_database_while_the_next_is_made(pg_dsn: str) -> None:
    """Chunk 1's insert waits for a tenant row another connection holds; the test makes
    chunk 2 only once PostgreSQL reports a backend waiting for that holder, so it passes only
    if chunk 1's statement left before chunk 2 was asked for (and ends once the holder lets
    go, both chunks stored). One pooled connection, warmed by a first batch: a statement's
    first use on a connection waits for its preparation before it is sent."""
    storage = postgres_store(pg_dsn, pool_size=1)
    await storage.open()
    holder = await asyncpg.connect(pg_dsn)
    try:
        tenant = await make_tenant(storage)
        await insert_streamed(storage, chunks=iter(_chunks(tenant, [1])))
        chunks = _chunks(tenant, [2, 3])
        held, release = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with holder.transaction():
                await holder.execute("SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE", tenant.id)
                held.set()
                await release.wait()

        def blocked_by(pid: int) -> bool:
            """Asked from another thread: this one's event loop is busy making a chunk."""

            async def ask() -> bool:
                conn = await asyncpg.connect(pg_dsn)
                try:
                    for _ in range(600):
                        if await conn.fetchval(
                            "SELECT count(*) > 0 FROM pg_stat_activity"
                            " WHERE $1 = ANY(pg_blocking_pids(pid))",
                            pid,
                        ):
                            return True
                        await asyncio.sleep(0.05)
                    return False
                finally:
                    await conn.close()

            answer: list[bool] = []
            thread = threading.Thread(target=lambda: answer.append(asyncio.run(ask())))
            thread.start()
            thread.join()
            return answer == [True]

        seen: list[bool] = []

        def made() -> Iterator[list[NewJob]]:
            yield chunks[0]
            seen.append(blocked_by(holder.get_server_pid()))
            release.set()
            yield chunks[1]

        holding = asyncio.create_task(hold())
        await held.wait()
        stored = await insert_streamed(storage, chunks=made())
        await holding
        assert seen == [True]
        assert [job.id for job in stored] == [job.id for chunk in chunks for job in chunk]
    finally:
        await holder.close()
        await storage.close()
