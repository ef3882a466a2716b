"""Circuit breakers shared across worker processes, on both backends: a breaker one
worker opens (written at its next claim) keeps every other worker, with its own storage
connection and its own gates, from claiming that provider's jobs; the half-open probe that
succeeds closes it for all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, Settings
from jobgate.domain.states import JobState
from jobgate.providers import gates as gates_module
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.roles.worker import Worker
from jobgate.services import breaker_sync
from jobgate.storage.postgres.store import is_postgres, postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import is_sqlite, sqlite_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio
RESET_S = 60.0


def registry(clock: FakeClock) -> ProviderRegistry:
    """One worker process's providers: its own gates, so its own breaker."""
    config = ProviderConfig(
        kind="sim", model_prefixes=("sim-",), breaker_failure_threshold=1, breaker_reset_s=RESET_S
    )
    return ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock)}, configs={"sim": config}, default="sim"
    )


@pytest.fixture
async def second(storage: Storage, clock: FakeClock) -> AsyncIterator[Storage]:
    """Another storage on the same database, as a second worker process would have."""
    other: Storage
    if is_postgres(storage):
        other = postgres_store(storage.engine.dsn, pool_size=2)
    else:
        assert is_sqlite(storage)
        other = sqlite_store(storage.engine.path, clock=clock)
    await other.open()
    yield other
    await other.close()


async def test_a_breaker_opened_by_one_worker_stops_the_other(
    storage: Storage, second: Storage, clock: FakeClock, settings: Settings
) -> None:
    tenant = await make_tenant(storage)
    first = Worker(
        storage=storage, providers=registry(clock), settings=settings, clock=clock, worker_id="a"
    )
    other = Worker(
        storage=second, providers=registry(clock), settings=settings, clock=clock, worker_id="b"
    )
    failing = {"model": "sim-echo", "messages": [], "sim": {"fail_with": "server_error"}}
    await submit_one(storage, job=new_job(tenant, request=failing), now=clock.now())
    await first.run_once()  # fails: the first worker's breaker opens
    assert await first.claim() == []  # its breaker is open; the change is written now
    assert set(await storage.breaker_states()) == {"sim"}

    waiting = new_job(tenant)
    await submit_one(storage, job=waiting, now=clock.now())
    assert await other.claim() == []  # the other worker keeps away too
    job = await second.job_get(job_id=waiting.id)
    assert job is not None and job.state is JobState.QUEUED and job.attempt == 0


async def test_a_successful_probe_closes_it_for_every_worker(
    storage: Storage, second: Storage, clock: FakeClock
) -> None:
    gates = [registry(clock).gates for _ in range(2)]
    syncs = [
        breaker_sync.BreakerSync(storage=s, gates=g, clock=clock, owner=f"w{i}")
        for i, (s, g) in enumerate(zip((storage, second), gates, strict=True))
    ]
    gates[0].record("sim", "j1", _server_error())
    await syncs[0].sync()
    await syncs[1].sync()
    assert gates[1].claim_plan(["sim"], 4) == []  # open in the other process too

    gates[1].apply_shared({"sim": 0.0})  # the time is up: half-open, one probe
    assert gates[1].claim_plan(["sim"], 4) == [(["sim"], 1)]
    gates[1].started("sim", "probe")
    gates[1].record("sim", "probe", None)  # the probe succeeded
    await syncs[1].sync()
    assert await storage.breaker_states() == {}
    clock.advance(breaker_sync.READ_EVERY_S)
    await syncs[0].sync()
    # The first process's own breaker stays open until its own reset (it saw the failure);
    # the shared row is gone, so no other process is held back by it.
    assert gates[0].gate("sim").breaker.state == gates_module.OPEN  # type: ignore[union-attr]
    assert gates[1].claim_plan(["sim"], 4) == [(["sim"], 4)]


async def test_the_shared_state_is_read_at_most_once_a_second(
    storage: Storage, second: Storage, clock: FakeClock
) -> None:
    gates = registry(clock).gates
    sync = breaker_sync.BreakerSync(storage=second, gates=gates, clock=clock, owner="w")
    await sync.sync()
    await storage.breaker_open(provider="sim", open_s=RESET_S, opened_by="elsewhere")
    await sync.sync()
    assert gates.claim_plan(["sim"], 4) == [(["sim"], 4)]  # cached: not read yet
    clock.advance(breaker_sync.READ_EVERY_S)
    await sync.sync()
    assert gates.claim_plan(["sim"], 4) == []


def _server_error() -> Exception:
    return errors.ProviderRetryable("boom", status_code=500)


class _Down:
    """A storage whose breaker writes fail (the database is unreachable)."""

    async def breaker_open(self, **_: object) -> None:
        raise ConnectionError("database down")

    async def breaker_states(self, **_: object) -> dict[str, float]:
        raise ConnectionError("database down")


async def test_a_failed_write_is_kept_for_the_next_claim(
    storage: Storage, clock: FakeClock
) -> None:
    gates = registry(clock).gates
    gates.record("sim", "j1", _server_error())
    down = breaker_sync.BreakerSync(storage=_Down(), gates=gates, clock=clock, owner="w")  # type: ignore[arg-type]
    await down.sync()  # logged, not raised: the claim goes on
    assert gates.breaker_changes == [("sim", RESET_S)]
    up = breaker_sync.BreakerSync(storage=storage, gates=gates, clock=clock, owner="w")
    await up.sync()
    assert gates.breaker_changes == [] and set(await storage.breaker_states()) == {"sim"}


async def test_callers_finding_the_breakers_stale_together_share_one_read(
    storage: Storage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API reads the shared breakers for every submit to a model route once they are a
    second old: the submits in flight at that moment wait for one read, not one each."""
    sync = breaker_sync.BreakerSync(
        storage=storage, gates=registry(clock).gates, clock=clock, owner="api", writes=False
    )
    real, release, reads = storage.breaker_states, asyncio.Event(), []

    async def gated() -> Any:
        reads.append(1)
        await release.wait()
        return await real()

    monkeypatch.setattr(storage, "breaker_states", gated)
    syncs = [asyncio.create_task(sync.sync()) for _ in range(20)]
    for _ in range(50):  # every task as far as it can go (loop turns, not time)
        await asyncio.sleep(0)
    release.set()
    await asyncio.gather(*syncs)
    assert len(reads) == 1
    clock.advance(breaker_sync.READ_EVERY_S)
    await sync.sync()
    assert len(reads) == 2
