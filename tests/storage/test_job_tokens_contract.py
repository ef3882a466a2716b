"""The JobTokenStore part of the contract, on both backends: the first secret is stored once,
each rotation adds the next generation (flagged when it revokes its elders), and pruning
deletes exactly the generations that verify nothing any more."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock

pytestmark = pytest.mark.asyncio
DAY_S = 86_400.0


async def test_the_first_secret_is_stored_once(storage: Storage, clock: FakeClock) -> None:
    assert await storage.job_token_secrets() == []
    await storage.job_token_secret_first(secret="one", now=clock.now())
    await storage.job_token_secret_first(secret="two", now=clock.now())
    stored = await storage.job_token_secrets()
    assert [(s.generation, s.secret, s.revokes_older) for s in stored] == [(1, "one", False)]
    assert stored[0].created_at == clock.now()


async def test_each_rotation_adds_the_next_generation(storage: Storage, clock: FakeClock) -> None:
    assert await storage.job_token_secret_rotate(secret="a", revokes_older=False) == 1
    await storage.job_token_secret_first(secret="ignored")  # a secret exists
    assert await storage.job_token_secret_rotate(secret="b", revokes_older=True) == 2
    assert await storage.job_token_secret_rotate(secret="c", revokes_older=False) == 3
    stored = await storage.job_token_secrets()
    assert [(s.generation, s.secret, s.revokes_older) for s in stored] == [
        (1, "a", False),
        (2, "b", True),
        (3, "c", False),
    ]


async def test_pruning_deletes_revoked_and_long_replaced_generations(
    storage: Storage, clock: FakeClock
) -> None:
    start = clock.now()
    await storage.job_token_secret_rotate(secret="a", revokes_older=False, now=start)
    await storage.job_token_secret_rotate(secret="b", revokes_older=False, now=start)
    later = start + timedelta(seconds=DAY_S - 1)
    # Generation 1 was replaced less than a token's longest life ago: its tokens may live.
    assert await storage.job_token_secret_prune(max_ttl_s=DAY_S, now=later) == 0
    assert [s.generation for s in await storage.job_token_secrets()] == [1, 2]
    after = start + timedelta(seconds=DAY_S + 1)
    assert await storage.job_token_secret_prune(max_ttl_s=DAY_S, now=after) == 1
    assert [s.generation for s in await storage.job_token_secrets()] == [2]

    await storage.job_token_secret_rotate(secret="c", revokes_older=False, now=after)
    await storage.job_token_secret_rotate(secret="d", revokes_older=True, now=after)
    assert await storage.job_token_secret_prune(max_ttl_s=DAY_S, now=after) == 2
    assert [s.secret for s in await storage.job_token_secrets()] == ["d"]


async def test_pruning_on_the_database_clock_keeps_fresh_generations(storage: Storage) -> None:
    await storage.job_token_secret_rotate(secret="a", revokes_older=False)
    await storage.job_token_secret_rotate(secret="b", revokes_older=False)
    assert await storage.job_token_secret_prune(max_ttl_s=DAY_S) == 0
    assert len(await storage.job_token_secrets()) == 2
