"""Honest progress against the simulator server: a background job whose provider
reports a `progress` fraction (`sim.progress`) shows it on GET /v1/jobs/{id} while it runs,
and still succeeds; one whose provider reports none shows `null` (OpenAI's background mode)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.gateway import SECRET_ENV, TERMINAL, WEBHOOK_SECRET, gateway

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def webhook_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_ENV, WEBHOOK_SECRET)


async def test_progress_grows_while_the_provider_runs_then_the_job_succeeds(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path, reconcile_after_s=0.2, reconcile_max_interval_s=0.3) as gw:
        job = await gw.submit(sim={"latency_s": 4, "progress": True})
        # Until progress shows or the job ends (not merely "not running": it may still be queued).
        running = await gw.until(
            job["id"], lambda j: j["progress"] is not None or j["status"] in TERMINAL
        )
        assert running["status"] == "running"
        assert 0 < running["progress"] < 1
        done = await gw.terminal(job["id"], timeout_s=60)
        assert done["status"] == "succeeded"


async def test_no_progress_when_the_provider_reports_none(tmp_path: Path) -> None:
    async with gateway(tmp_path, reconcile_after_s=0.2, reconcile_max_interval_s=0.3) as gw:
        job = await gw.submit(sim={"latency_s": 1})
        done = await gw.terminal(job["id"], timeout_s=60)
        assert done["status"] == "succeeded" and done["progress"] is None
