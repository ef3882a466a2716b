"""Honest progress (issue 19): a background job shows when the reconciler last asked its
provider (`last_checked_at`), on both backends."""

from __future__ import annotations

from jobgate.clock import to_unix
from jobgate.http.views import job_view
from tests.services.test_background_mode import DUE_S, Rig
from tests.services.test_background_mode import rig as rig  # the fixture

__all__ = ["rig"]


async def test_last_checked_at_follows_the_reconciler(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 10_000})
    assert job_view(job)["last_checked_at"] is None  # created, never checked yet
    await rig.sweep_at(DUE_S)
    checked = await rig.get(job.id)
    assert job_view(checked)["last_checked_at"] == to_unix(rig.clock.now())
