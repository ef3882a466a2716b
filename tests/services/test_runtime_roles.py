"""A background role that crashes is restarted inside its process with backoff and counted in
/metrics (`jobgate_role_restarts_total{role}`); only a fatal error (a bad setting, an unusable
schema) ends the process, with a non-zero exit so that a supervisor sees it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from jobgate import errors
from jobgate.config import load_settings
from jobgate.process.runtime import Runtime
from jobgate.roles.supervisor import RoleSupervisor
from jobgate.testing import FakeClock


def restarts(role: str) -> float:
    return REGISTRY.get_sample_value("jobgate_role_restarts_total", {"role": role}) or 0.0


class FlakyRole:
    """Crashes on its first `crashes` runs, then runs until asked to stop."""

    built = 0
    running = asyncio.Event()  # set when a build runs without crashing

    def __init__(self, crashes: int, error: Exception | None = None) -> None:
        FlakyRole.built += 1
        self.number = FlakyRole.built
        self.crashes = crashes
        self.error = error or RuntimeError("boom")
        self.stop = asyncio.Event()

    async def run(self) -> None:
        if self.number <= self.crashes:
            raise self.error
        FlakyRole.running.set()
        await self.stop.wait()

    def request_stop(self) -> None:
        self.stop.set()


async def test_a_crashing_role_is_rebuilt_with_backoff_and_counted() -> None:
    clock = FakeClock()
    FlakyRole.built = 0
    FlakyRole.running = asyncio.Event()
    built: list[FlakyRole] = []

    def build() -> FlakyRole:
        built.append(FlakyRole(crashes=4))
        return built[-1]

    supervisor = RoleSupervisor("flaky", build, clock=clock, backoff_base_s=0.5, backoff_max_s=2)
    before = restarts("flaky")
    started = clock.monotonic()
    running = asyncio.create_task(supervisor.run())
    await asyncio.wait_for(FlakyRole.running.wait(), 5)
    assert len(built) == 5
    assert supervisor.restarts == 4 and restarts("flaky") == before + 4
    assert clock.monotonic() - started == 0.5 + 1 + 2 + 2  # doubling, capped
    assert not running.done()  # the fifth runs
    supervisor.request_stop()
    await asyncio.wait_for(running, 5)
    assert built[-1].stop.is_set()


async def test_a_role_that_ran_healthy_for_a_while_restarts_at_the_base_delay() -> None:
    clock = FakeClock()
    FlakyRole.built = 0
    FlakyRole.running = asyncio.Event()
    runs = 0

    class SlowCrash(FlakyRole):
        async def run(self) -> None:
            nonlocal runs
            runs += 1
            if runs <= 2:
                clock.advance(120)  # healthy for two minutes, then a crash
                raise RuntimeError("late")
            FlakyRole.running.set()
            await self.stop.wait()

    supervisor = RoleSupervisor(
        "late", lambda: SlowCrash(0), clock=clock, backoff_base_s=1, healthy_after_s=60
    )
    running = asyncio.create_task(supervisor.run())
    await asyncio.wait_for(FlakyRole.running.wait(), 5)
    assert clock.monotonic() == FakeClock().monotonic() + 2 * 120 + 1 + 1  # never doubled
    supervisor.request_stop()
    await asyncio.wait_for(running, 5)


async def test_a_fatal_error_is_not_retried() -> None:
    fatal = errors.ConfigError("providers", "no such provider")
    supervisor = RoleSupervisor("fatal", lambda: FlakyRole(1_000, fatal), clock=FakeClock())
    with pytest.raises(type(fatal)):
        await asyncio.wait_for(supervisor.run(), 5)
    assert supervisor.restarts == 0


async def test_the_process_keeps_a_crashed_role_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = Runtime(load_settings({}, database_url=f"sqlite:///{tmp_path}/j.db"))
    real_build = runtime.dispatcher
    built = 0
    rebuilt = asyncio.Event()

    def build() -> object:
        nonlocal built
        built += 1
        if built == 2:
            rebuilt.set()
        dispatcher = real_build()
        if built == 1:

            async def broken() -> None:
                raise RuntimeError("boom")

            monkeypatch.setattr(dispatcher, "run", broken)
        return dispatcher

    monkeypatch.setattr(runtime, "dispatcher", build)
    before = restarts("dispatcher")
    await runtime.open()
    try:
        stop = asyncio.Event()
        running = asyncio.create_task(runtime.run_roles(("reaper", "dispatcher"), stop))
        await asyncio.wait_for(rebuilt.wait(), 20)
        assert restarts("dispatcher") == before + 1
        assert not running.done()
        stop.set()
        await asyncio.wait_for(running, 20)  # a clean stop: no error
    finally:
        await runtime.close()


async def test_a_fatal_role_error_ends_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def misconfigured() -> None:
        raise errors.ConfigError("providers", "no such provider")

    runtime = Runtime(load_settings({}, database_url=f"sqlite:///{tmp_path}/j.db"))
    real_build = runtime.reaper

    def build() -> object:
        reaper = real_build()
        monkeypatch.setattr(reaper, "run", misconfigured)
        return reaper

    monkeypatch.setattr(runtime, "reaper", build)
    await runtime.open()
    try:
        with pytest.raises(errors.JobgateError, match="role reaper crashed"):
            await asyncio.wait_for(runtime.run_roles(("reaper", "dispatcher"), asyncio.Event()), 30)
    finally:
        await runtime.close()


async def test_a_role_that_returns_on_its_own_is_restarted_too() -> None:
    FlakyRole.running = asyncio.Event()
    runs = 0

    class Quitter(FlakyRole):
        async def run(self) -> None:
            nonlocal runs
            runs += 1
            if runs == 1:
                return  # e.g. a loop that ended by mistake
            FlakyRole.running.set()
            await self.stop.wait()

    supervisor = RoleSupervisor("quitter", lambda: Quitter(0), clock=FakeClock())
    running = asyncio.create_task(supervisor.run())
    await asyncio.wait_for(FlakyRole.running.wait(), 5)
    assert supervisor.restarts == 1
    supervisor.request_stop()
    await asyncio.wait_for(running, 5)
