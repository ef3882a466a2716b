"""The role table (process.roles): each role starts the loops its row declares, supervised
ones under a RoleSupervisor, and an unknown role is refused before anything starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jobgate import errors
from jobgate.config import load_settings
from jobgate.process import roles
from jobgate.process.runtime import Runtime


def test_the_table_names_every_role_once_in_start_order() -> None:
    assert roles.available_roles() == (
        "api",
        "worker",
        "reaper",
        "dispatcher",
        "reconciler",
        "batches",
    )
    loop_names = [loop.name for spec in roles.ROLE_TABLE for loop in spec.loops]
    assert len(loop_names) == len(set(loop_names))  # a loop's name labels its restarts


async def test_a_role_starts_the_loops_of_its_row(tmp_path: Path) -> None:
    runtime = Runtime(load_settings({}, database_url=f"sqlite:///{tmp_path}/j.db"))
    await runtime.open()
    try:
        stop = asyncio.Event()
        stop.set()  # start every loop, then stop them all at once
        await asyncio.wait_for(runtime.run_roles(("reaper", "batches"), stop), 20)
        assert set(runtime.supervisors) == {"reaper", "schedules", "batches"}
    finally:
        await runtime.close()


async def test_an_unknown_role_is_refused_before_anything_starts(tmp_path: Path) -> None:
    runtime = Runtime(load_settings({}, database_url=f"sqlite:///{tmp_path}/j.db"))
    with pytest.raises(errors.ConfigError, match="unknown role 'janitor'"):
        await runtime.run_roles(("reaper", "janitor"), asyncio.Event())
    assert runtime.supervisors == {}


@pytest.mark.parametrize("native_batches", [True, False], ids=["native", "jobs-only"])
async def test_the_batches_role_needs_only_the_keys_of_native_batch_providers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native_batches: bool
) -> None:
    monkeypatch.delenv("JOBGATE_TEST_NO_SUCH_KEY", raising=False)
    config = tmp_path / "jobgate.toml"
    config.write_text(
        '[providers.up]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "JOBGATE_TEST_NO_SUCH_KEY"\n'
        f"native_batches = {str(native_batches).lower()}\n"
    )
    settings = load_settings({}, config_path=config, database_url=f"sqlite:///{tmp_path}/j.db")
    runtime = Runtime(settings)
    await runtime.open()
    try:
        stop = asyncio.Event()
        stop.set()
        if native_batches:
            with pytest.raises(errors.ConfigError, match="JOBGATE_TEST_NO_SUCH_KEY"):
                await runtime.run_roles(("reaper", "batches"), stop)
            assert runtime.supervisors == {}
        else:
            await asyncio.wait_for(runtime.run_roles(("batches",), stop), 20)
            assert set(runtime.supervisors) == {"batches"}
        with pytest.raises(errors.ConfigError, match="JOBGATE_TEST_NO_SUCH_KEY"):
            roles.check_needs(runtime, ("worker",))  # the worker needs every provider's key
    finally:
        await runtime.close()
