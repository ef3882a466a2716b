"""A role that crashes takes its process down with a non-zero exit, so that a supervisor
restarts it (a worker role dying silently inside a live process would strand the queue)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jobgate import errors
from jobgate.config import load_settings
from jobgate.services.runtime import Runtime


async def test_a_crashed_role_fails_the_whole_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    runtime = Runtime(load_settings({}, database_url=f"sqlite:///{tmp_path}/j.db"))
    dispatcher = runtime.dispatcher()
    monkeypatch.setattr(dispatcher, "run", broken)
    monkeypatch.setattr(runtime, "dispatcher", lambda: dispatcher)
    await runtime.open()
    try:
        stop = asyncio.Event()
        with pytest.raises(errors.JobgateError, match="role dispatcher crashed"):
            await asyncio.wait_for(runtime.run_roles(("reaper", "dispatcher"), stop), 30)
    finally:
        await runtime.close()
