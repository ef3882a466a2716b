"""The worker's per-tick lease-expiry check while long calls wait (the in-flight
measurement): one comparison while every lease is fresh, however many calls are held, and
still every call stopped once its own lease is about to run out. Both stores."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from jobgate import errors
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec
from jobgate.testing import Block, FakeClock, ScriptedProvider

BODY = {"model": "m", "messages": [{"role": "user", "content": "long"}]}


class _CountingDict(dict[str, Any]):
    """The worker's in-flight table, counting the walks over its entries."""

    walks = 0

    def values(self) -> Any:
        self.walks += 1
        return super().values()


async def _held(runtime: Runtime, scripted: ScriptedProvider, worker: Any, tenant_id: str) -> Block:
    """Submit one call and let `worker` claim it; answers the call's block once it runs."""
    block = Block()
    scripted.script.append(block)
    await runtime.jobs.submit(
        tenant_id=tenant_id,
        spec=SubmitSpec(endpoint="/v1/chat/completions", body=BODY, provider="scripted"),
    )
    asyncio.create_task(worker.run_once(limit=1))  # noqa: RUF006 (ended by the test's blocks)
    await asyncio.wait_for(block.started.wait(), 10)
    return block


async def test_a_fresh_renewal_makes_the_tick_check_one_comparison(
    runtime: Runtime, scripted: ScriptedProvider, clock: FakeClock
) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    worker = runtime.worker(concurrency=20)
    table = _CountingDict()
    worker._inflight = table
    blocks = [await _held(runtime, scripted, worker, owner.id) for _ in range(20)]
    clock.advance(15)
    assert await worker.heartbeat_once()
    walks = table.walks
    for _ in range(40):  # 40 ticks, each within the renewed leases' margin
        clock.advance(1)
        worker.check_lease_expiry()
    # At most one walk: when the claims' time (the floor) is 45 s old, one pass finds every
    # lease renewed since and raises the floor to the renewal.
    assert table.walks - walks <= 1
    assert not any(block.cancelled for block in blocks)
    for block in blocks:
        block.release.set()


async def test_each_call_is_stopped_when_its_own_lease_is_about_to_expire(
    runtime: Runtime,
    scripted: ScriptedProvider,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner = (await runtime.tenants.create("acme")).tenant
    worker = runtime.worker(concurrency=4)
    early = await _held(runtime, scripted, worker, owner.id)  # claimed at t = 0
    clock.advance(30)
    late = await _held(runtime, scripted, worker, owner.id)  # claimed at t = 30

    async def unreachable(**_: object) -> list[object]:
        raise errors.StorageUnavailable("test: network partition")

    monkeypatch.setattr(runtime.storage, "job_heartbeat", unreachable)
    assert not await worker.heartbeat_once()  # no renewal lands from here on
    clock.advance(14)  # t = 44: the early lease has one second left before the margin
    worker.check_lease_expiry()
    assert not early.cancelled and not late.cancelled
    clock.advance(1)  # t = 45: lease TTL 60 less the 15 s margin
    with caplog.at_level(logging.WARNING):
        worker.check_lease_expiry()
        await asyncio.sleep(0.05)
    assert early.cancelled and not late.cancelled
    assert "lease about to expire" in caplog.text
    clock.advance(29)  # t = 74: the late lease (claimed at 30) is 44 s old
    worker.check_lease_expiry()
    await asyncio.sleep(0.05)
    assert not late.cancelled
    clock.advance(1)  # t = 75
    worker.check_lease_expiry()
    await asyncio.sleep(0.05)
    assert late.cancelled
