"""`queue_position` is counted on every status read of a queued job, so the count is bounded:
at most ranges.QUEUE_POSITION_COUNTED jobs ahead are counted (60 ms per read at 100,000 ahead
before), and a job farther back reads one more than that. Both backends."""

from __future__ import annotations

import pytest

from jobgate.domain import ranges
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job

pytestmark = pytest.mark.asyncio


async def test_the_count_ahead_stops_at_its_bound(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranges, "QUEUE_POSITION_COUNTED", 3)
    tenant = await make_tenant(storage)
    jobs = [new_job(tenant, priority=5) for _ in range(6)]
    urgent = new_job(tenant, priority=1)
    for job in [*jobs, urgent]:
        await storage.job_insert(job=job, now=clock.now())
    positions = []
    for job in [urgent, *jobs]:
        stored = await storage.job_get(job_id=job.id)
        assert stored is not None
        positions.append(await storage.job_queue_position(job=stored, now=clock.now()))
    assert positions == [1, 2, 3, 4, 4, 4, 4]
