"""A background-mode provider with no reconciler running says so: a warning when an API or a
worker starts, a readiness detail, and a note on each job that waits for one."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from jobgate.cli import startup_checks
from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import Lease
from jobgate.process.runtime import Runtime
from jobgate.services import presence
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock, eventually
from tests.api_server import Api
from tests.storage.helpers import make_tenant, new_job, submit_one

SQLITE = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        shutdown_grace_s=0,
        providers={"bg": ProviderConfig(kind="sim", mode="background")},
    )


async def test_no_background_provider_needs_no_reconciler(storage: Storage) -> None:
    plain = Settings(database_url="sqlite:///unused.db")
    assert presence.background_providers(plain) == []
    assert await presence.reconciler_missing(storage, plain) is None


@SQLITE
async def test_missing_until_a_reconciler_beats_and_again_once_it_stops(
    backend: str, storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    missing = await presence.reconciler_missing(storage, settings)
    assert missing is not None
    assert "no reconciler has ever run" in missing and "bg" in missing
    assert "jobgate reconciler" in missing
    beat = presence.Heartbeat(storage, settings, clock_=clock)
    await beat.beat_once()
    assert await presence.reconciler_missing(storage, settings) is None
    clock.advance(presence.stale_after_s(settings) - 1)
    assert await presence.reconciler_missing(storage, settings) is None
    clock.advance(2)
    stale = await presence.reconciler_missing(storage, settings)
    assert stale is not None and "no reconciler seen for" in stale


@SQLITE
async def test_the_heartbeat_loop_beats_until_stopped_then_forgets(
    backend: str, storage: Storage, settings: Settings
) -> None:
    beat = presence.Heartbeat(storage, settings, roles=("reconciler", "worker"))
    running = asyncio.create_task(beat.run())

    async def beating() -> bool:
        return set(await storage.role_heartbeat_ages()) == {"reconciler", "worker"}

    await eventually(beating, what="the first heartbeats")
    assert await presence.reconciler_missing(storage, settings) is None
    beat.request_stop()
    await asyncio.wait_for(running, 5)
    # A process that stops says so at once, not a stale period later.
    assert await storage.role_heartbeat_ages() == {}
    assert await presence.reconciler_missing(storage, settings) is not None


@SQLITE
async def test_api_and_worker_warn_at_start_without_a_reconciler(
    backend: str, runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="jobgate.startup"):
        await startup_checks.warn(runtime, ("reconciler", "api"))
        await startup_checks.warn(runtime, ("reaper",))
        assert caplog.records == []
        await startup_checks.warn(runtime, ("api",))
        await startup_checks.warn(runtime, ("worker",))
    assert len(caplog.records) == 2
    assert all("runs in background mode" in r.getMessage() for r in caplog.records)
    await presence.Heartbeat(runtime.storage, runtime.settings).beat_once()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="jobgate.startup"):
        await startup_checks.warn(runtime, ("api", "worker"))
    assert caplog.records == []


@SQLITE
async def test_readiness_and_a_waiting_job_say_that_no_reconciler_runs(
    backend: str, api: Api, storage: Storage, clock: FakeClock
) -> None:
    ready = (await api.http.get("/readyz")).json()
    assert ready["status"] == "ready" and "background mode" in ready["warnings"][0]

    tenant = await make_tenant(storage)
    key = (await api.runtime.tenants.issue_key(tenant)).api_key
    await submit_one(storage, job=new_job(tenant, provider="bg"), now=clock.now())
    [claimed] = await storage.job_claim(worker_id="w1", limit=1, lease_ttl_s=60, now=clock.now())
    await storage.job_background_accept(
        lease=Lease(claimed.id, claimed.lease_token or ""),
        provider_job_id="resp_up_1",
        provider_status="queued",
        reconcile_in_s=10,
        now=clock.now(),
    )
    headers = {"Authorization": f"Bearer {key}"}
    waiting = (await api.http.get(f"/v1/jobs/{claimed.id}", headers=headers)).json()
    assert waiting["status"] == "running" and waiting["phase"] == "awaiting_provider"
    assert waiting["note"].startswith("waiting for a reconciler: no reconciler has ever run")
    assert waiting["waiting"] == {"reason": "no_worker", "detail": waiting["note"], "until": None}

    await presence.Heartbeat(storage, api.runtime.settings, clock_=clock).beat_once()
    clock.advance(timedelta(seconds=1).total_seconds())
    settled = (await api.http.get(f"/v1/jobs/{claimed.id}", headers=headers)).json()
    assert "note" not in settled and settled["waiting"] is None
    assert "warnings" not in (await api.http.get("/readyz")).json()
