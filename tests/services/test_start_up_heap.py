"""A server process freezes its start-up heap once its roles are built, so that the garbage
collector's full collections walk only what the work allocates since."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from jobgate.config import load_settings
from jobgate.process.runtime import Runtime
from jobgate.testing import eventually


async def test_running_roles_freezes_the_start_up_heap(tmp_path: Path) -> None:
    gc.unfreeze()  # whatever an earlier test froze
    runtime = Runtime(load_settings({}, database_url=f"sqlite:///{tmp_path}/j.db"))
    await runtime.open()
    try:
        stop = asyncio.Event()
        running = asyncio.create_task(runtime.run_roles(("reaper",), stop))
        await eventually(lambda: gc.get_freeze_count() > 0, what="the start-up heap frozen")
        stop.set()
        await asyncio.wait_for(running, 20)
    finally:
        gc.unfreeze()  # the rest of the test session is not a server process
        await runtime.close()
