"""SQLite's claim reads each tenant's candidates as plain tuples, in the SELECT's column order,
and decodes a stored run_at once per claim: the jobs of one submit batch share theirs."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from jobgate.domain.fairness import Candidate
from jobgate.storage.rows import unix_time
from jobgate.storage.sqlite import claims
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one


async def test_candidates_read_by_position_share_their_decoded_times(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "jobgate.db"
    storage = sqlite_store(str(path), clock=clock)
    await storage.open()
    await storage.migrate()
    try:
        tenant = await make_tenant(storage)
        first, second, third = (
            new_job(tenant, priority=p, concurrency_key=k)
            for p, k in ((1, "a"), (2, "b"), (3, "a"))
        )
        later = clock.now() + timedelta(seconds=1)
        for job in (first, second):
            await submit_one(storage, job=job, now=clock.now())
        await submit_one(storage, job=third, now=later)
    finally:
        await storage.close()
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row  # as the writer's connection (the claim asks for tuples)
    params: dict[str, Any] = {
        "tenant_id": tenant.id,
        "now": (later + timedelta(seconds=1)).timestamp(),
        "providers": None,
        "models": None,
        "skip_models": None,
        "full_keys": None,
        "limit": 10,
    }
    try:
        times: dict[Any, datetime] = {}
        found = claims.candidates(conn, params, keep=None, times=times)
        asked: list[str | None] = []

        def keep(key: str | None) -> bool:
            asked.append(key)
            return key != "b"

        kept = claims.candidates(conn, params, keep=keep, times=times)
    finally:
        conn.close()
    at, at_later = unix_time(clock.now().timestamp()), unix_time(later.timestamp())
    assert at is not None and at_later is not None
    assert found == (
        Candidate(first.id, 1, at),
        Candidate(second.id, 2, at),
        Candidate(third.id, 3, at_later),
    )
    assert found[0].run_at is found[1].run_at  # one stored time, decoded once
    assert len(times) == 2
    assert asked == ["a", "b", "a"]  # in order, each key asked once
    assert kept == (found[0], found[2])
