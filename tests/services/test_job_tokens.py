"""The job-token service on both backends, as two API processes over one database: tokens are
verified from cached secrets (a read at most every few seconds, and once a second for a
generation not seen yet); a rotation reaches the other process within the cache's time,
keeping or revoking what was issued before, even when its clean-up never ran."""

from __future__ import annotations

from typing import Any

import pytest

from jobgate import errors
from jobgate.services.job_tokens import REFUSED, JobTokenService
from jobgate.storage.protocol import Storage
from jobgate.storage.records import JobTokenSecret
from jobgate.testing import FakeClock

pytestmark = pytest.mark.asyncio


class CountingSecrets:
    """The storage, counting the reads of the secrets."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.reads = 0

    async def job_token_secrets(self) -> list[JobTokenSecret]:
        self.reads += 1
        return await self.storage.job_token_secrets()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)


async def issue(service: JobTokenService, job_id: str = "job_1") -> str:
    issued = await service.issue(tenant_id="ten_1", job_id=job_id, ttl_s=600, scopes=["read"])
    return issued.token


async def accepted(service: JobTokenService, token: str) -> bool:
    try:
        await service.verify(token, job_id="job_1", scope="read")
    except errors.Unauthorized as exc:
        assert str(exc) == REFUSED
        return False
    return True


async def test_tokens_are_verified_from_cached_secrets(storage: Storage, clock: FakeClock) -> None:
    counted = CountingSecrets(storage)
    service = JobTokenService(storage=counted, clock=clock)
    token = await issue(service)
    assert counted.reads == 2  # none stored yet: the first generation is stored, then read
    for _ in range(50):
        assert await accepted(service, token)
    for forged in ("jgt_x.y", token[:-2], "jg_nothing"):
        assert not await accepted(service, forged)
    assert counted.reads == 2
    clock.advance(5)
    assert await accepted(service, token)
    assert counted.reads == 3


async def test_a_rotation_reaches_another_process_within_the_cache_time(
    storage: Storage, clock: FakeClock
) -> None:
    here, there = (JobTokenService(storage=storage, clock=clock) for _ in range(2))
    old = await issue(here)
    assert await accepted(there, old)
    await here.rotate(revoke=False)
    new = await issue(here)
    # `there` has not seen generation 2: it reads again (it last read over a second ago).
    clock.advance(1)
    assert await accepted(there, new) and await accepted(there, old)

    await here.rotate(revoke=True)
    newest = await issue(here)
    assert not await accepted(here, old) and not await accepted(here, new)
    assert await accepted(there, new)  # cached for a few seconds, as a revoked API key is
    clock.advance(5)
    assert not await accepted(there, new) and not await accepted(there, old)
    assert await accepted(there, newest)


async def test_an_unseen_generation_is_read_at_most_once_a_second(
    storage: Storage, clock: FakeClock
) -> None:
    counted = CountingSecrets(storage)
    service = JobTokenService(storage=counted, clock=clock)
    other = JobTokenService(storage=storage, clock=clock)
    await issue(service)
    reads = counted.reads
    await other.rotate(revoke=False)
    fresh = await issue(other)
    assert not await accepted(service, fresh)  # read under a second ago: not read again
    assert counted.reads == reads
    clock.advance(1)
    for _ in range(20):
        assert await accepted(service, fresh)
    assert counted.reads == reads + 1


async def test_a_revoking_rotation_holds_even_before_its_clean_up(
    storage: Storage, clock: FakeClock
) -> None:
    service = JobTokenService(storage=storage, clock=clock)
    old = await issue(service)
    # The rotation stored, then its process died before deleting the revoked generations.
    await storage.job_token_secret_rotate(secret="A" * 44, revokes_older=True)
    clock.advance(5)
    assert len(await storage.job_token_secrets()) == 2
    assert not await accepted(service, old)
    assert await accepted(service, await issue(service))
