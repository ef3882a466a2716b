"""Honest progress: a background job shows when the reconciler last asked its
provider (`last_checked_at`) and the progress its provider reported, on both backends."""

from __future__ import annotations

import pytest

from jobgate.clock import to_unix
from jobgate.domain import progress
from jobgate.http.views import job_view
from jobgate.storage.records import ReconcileDeferral
from tests.roles.test_worker_background import DUE_S, Rig
from tests.roles.test_worker_background import rig as rig  # the fixture

__all__ = ["rig"]


async def test_last_checked_at_follows_the_reconciler(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 10_000})
    assert job_view(job)["last_checked_at"] is None  # created, never checked yet
    await rig.sweep_at(DUE_S)
    checked = await rig.get(job.id)
    assert job_view(checked)["last_checked_at"] == to_unix(rig.clock.now())


async def test_progress_is_what_the_provider_reported(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 10_000})
    assert job_view(job)["progress"] is None  # nothing reported: nothing invented
    assert job.provider_job_id is not None
    deferral = ReconcileDeferral(job.id, job.provider_job_id, 60.0, progress=0.25)
    assert await rig.storage.job_reconcile_defer(deferral=deferral, now=rig.clock.now())
    assert job_view(await rig.get(job.id))["progress"] == 0.25
    silent = ReconcileDeferral(job.id, job.provider_job_id, 60.0)  # a check that said nothing
    assert await rig.storage.job_reconcile_defer(deferral=silent, now=rig.clock.now())
    assert job_view(await rig.get(job.id))["progress"] == 0.25


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"request_counts": {"processing": 3, "succeeded": 1, "errored": 0}}, 0.25),
        ({"request_counts": {"processing": 0, "succeeded": 2, "canceled": 2}}, 1.0),
        ({"request_counts": {"processing": 0}}, None),
        ({"progress": 0.4}, 0.4),
        ({"progress": 7}, None),
        ({"progress": True}, None),
        ({"status": "in_progress"}, None),
        (None, None),
    ],
)
def test_reported_progress(body: dict[str, object] | None, expected: float | None) -> None:
    assert progress.reported(body) == expected


async def test_sim_progress_grows_over_latency_then_the_job_succeeds(rig: Rig) -> None:
    job = await rig.start(sim={"latency_s": 100, "progress": True})
    await rig.sweep_at(DUE_S)  # 45 s into a 100 s run
    running = await rig.get(job.id)
    assert running.state.value == "running"
    assert running.progress is not None and 0.4 < running.progress < 0.5
    await rig.sweep_at(100)
    assert (await rig.get(job.id)).state.value == "succeeded"
