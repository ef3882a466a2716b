"""Shared circuit breakers, the storage contract on SQLite and PostgreSQL alike: an
open breaker's time left is measured by the database's clock, reopening replaces it, closing
removes it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock

pytestmark = pytest.mark.asyncio


async def test_open_read_reopen_close(storage: Storage, clock: FakeClock) -> None:
    now = clock.now()
    assert await storage.breaker_states(now=now) == {}
    await storage.breaker_open(provider="a", open_s=30, opened_by="w1", now=now)
    await storage.breaker_open(provider="b", open_s=5, opened_by="w2", now=now)
    later = now + timedelta(seconds=10)
    states = await storage.breaker_states(now=later)
    assert states == {"a": pytest.approx(20), "b": pytest.approx(-5)}  # b: half-open
    await storage.breaker_open(provider="b", open_s=60, opened_by="w2", now=later)  # probe failed
    assert (await storage.breaker_states(now=later))["b"] == pytest.approx(60)
    await storage.breaker_close(provider="a")
    await storage.breaker_close(provider="a")  # closing a closed breaker is harmless
    assert set(await storage.breaker_states(now=later)) == {"b"}
