"""SQLite has no NOTIFY: a process notices other processes' commits through the writer
connection's data_version, and wakes its waiters only then."""

from __future__ import annotations

import asyncio
from pathlib import Path

from jobgate.storage.sqlite.store import sqlite_store
from tests.storage.helpers import make_tenant, new_job, submit_one


async def test_a_commit_by_another_process_wakes_waiters(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    here, there = sqlite_store(path), sqlite_store(path)  # two writers: two "processes"
    for storage in (here, there):
        await storage.open()
    await here.migrate()
    try:
        tenant = await make_tenant(here)
        job = (await submit_one(here, job=new_job(tenant))).job
        await here.listen()
        with here.changes.watch_job(job.id) as changed:
            await submit_one(here, job=new_job(tenant))  # its own commit is not foreign...
            await asyncio.sleep(1.2)
            assert not changed.is_set()  # ...so the watch does not wake everyone for it
            await there.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="elsewhere")
            await asyncio.wait_for(changed.wait(), timeout=5)
    finally:
        for storage in (here, there):
            await storage.close()
