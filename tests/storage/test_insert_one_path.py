"""Storage.job_insert, the one way in, on both backends: keys and chunks together (a key
repeated in a later chunk replays the first, all in one transaction), a single job's refused
key answered in its place, and keys that do not match the jobs refused before anything."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobgate import errors
from jobgate.domain.job import NewJob
from jobgate.storage.protocol import Storage
from jobgate.storage.records import IdempotencyClaim, SubmitOutcome
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, queued

pytestmark = pytest.mark.asyncio


def claim(key: str, body_hash: str = "h") -> IdempotencyClaim:
    return IdempotencyClaim(route="r", key=key, body_hash=body_hash, status_code=202, ttl_s=60)


async def test_a_key_in_a_later_chunk_replays_its_first_use(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    first, plain, again = new_job(tenant), new_job(tenant), new_job(tenant)

    def chunks() -> Iterator[list[NewJob]]:
        yield [first, plain]
        yield [again]

    inserted = await storage.job_insert(
        chunks=chunks(), keys=[claim("k"), None, claim("k")], now=clock.now()
    )
    one, two, three = inserted.results
    assert isinstance(one, SubmitOutcome) and not one.replayed
    assert isinstance(two, SubmitOutcome) and not two.replayed
    assert isinstance(three, SubmitOutcome) and three.replayed and three.job == one.job
    assert [job.id for job in inserted.jobs] == [first.id, plain.id]
    assert await queued(storage, tenant.id) == 2


async def test_a_single_job_whose_key_is_reused_is_refused_in_its_place(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    await storage.job_insert(chunks=[[new_job(tenant)]], keys=[claim("k")], now=clock.now())
    inserted = await storage.job_insert(
        chunks=[[new_job(tenant)]], keys=[claim("k", "other")], now=clock.now()
    )
    (refused,) = inserted.results
    assert isinstance(refused, errors.IdempotencyKeyReused)
    assert inserted.jobs == []
    assert await queued(storage, tenant.id) == 1


async def test_keys_that_do_not_match_the_jobs_are_refused(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    with pytest.raises(ValueError):
        await storage.job_insert(
            chunks=[[new_job(tenant), new_job(tenant)]], keys=[claim("k")], now=clock.now()
        )
    assert await queued(storage, tenant.id) == 0


async def test_a_call_without_jobs_stores_nothing(storage: Storage, clock: FakeClock) -> None:
    inserted = await storage.job_insert(chunks=[[], []], now=clock.now())
    assert inserted.jobs == [] and inserted.results == []
