"""Counters and labels the shipped alerts need: a bulk reclaim is counted and
warned about; the queue-wait histogram's tenant label is bounded."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from jobgate import errors, metrics
from jobgate.config import Settings
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec
from jobgate.services.tenant_labels import TenantLabels
from jobgate.storage.records import Tenant
from jobgate.testing import FakeClock

pytestmark = pytest.mark.asyncio


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db", lease_ttl_s=60, heartbeat_interval_s=15,
        reaper_warn_threshold=2,
    )  # fmt: skip


def bulk_reclaims() -> float:
    return REGISTRY.get_sample_value("jobgate_reaper_bulk_reclaims_total") or 0


async def test_a_bulk_reclaim_is_counted_and_warned_about(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    tenant = (await runtime.tenants.create("acme")).tenant
    spec = SubmitSpec(
        endpoint="/v1/chat/completions",
        body={"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]},
    )
    reaper = runtime.reaper()
    for crashed in (2, 3):  # at the threshold: no alarm; above it: one
        for _ in range(crashed):
            await runtime.jobs.submit(tenant_id=tenant.id, spec=spec)
        now = await runtime.storage.database_now()  # the fake clock's, on SQLite
        claimed = await runtime.storage.job_claim(
            worker_id="w", limit=crashed, lease_ttl_s=60, now=now
        )
        assert len(claimed) == crashed  # and the worker dies holding them
        before = bulk_reclaims()
        with caplog.at_level(logging.WARNING, logger="jobgate.roles.reaper"):
            caplog.clear()
            reaped = await reaper.reap_once(now=now + timedelta(seconds=61))
        assert reaped.reaped.total == crashed
        warned = [r for r in caplog.records if "reclaimed many leases" in r.getMessage()]
        assert (bulk_reclaims() - before, len(warned)) == (int(crashed > 2),) * 2


class Tenants:
    def __init__(self, *, failing: bool = False) -> None:
        self.reads = 0
        self.failing = failing

    async def tenant_get(self, *, tenant_id: str | None = None, name: str | None = None) -> Tenant:
        self.reads += 1
        if self.failing:
            raise errors.StorageUnavailable()
        assert tenant_id is not None
        return Tenant(tenant_id, tenant_id.removeprefix("ten_"), "whsec_x", FakeClock().now())


async def test_tenant_labels_are_bounded_and_read_once() -> None:
    storage = Tenants()
    labels = TenantLabels(storage, limit=2)
    assert [await labels.label(t) for t in ("ten_a", "ten_b", "ten_c", "ten_a")] == [
        "a", "b", metrics.OTHER_TENANT, "a",
    ]  # fmt: skip
    assert storage.reads == 2
    assert await TenantLabels(Tenants(failing=True)).label("ten_a") == metrics.OTHER_TENANT
