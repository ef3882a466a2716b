"""The SQLite database file and its WAL and shared-memory files are created 0600 (they hold
prompts, results and key hashes), whatever the umask; an existing file keeps its mode."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobgate.storage.sqlite.store import sqlite_store
from tests.storage.helpers import make_tenant, new_job, submit_one


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0o002)  # a permissive umask: group and others could read
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_database_wal_and_shm_are_created_0600(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "data" / "jobgate.db"
    storage = sqlite_store(str(path))
    await storage.open()
    try:
        await storage.migrate()
        tenant = await make_tenant(storage)
        await submit_one(storage, job=new_job(tenant))
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert all(f.exists() for f in files)
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    finally:
        await storage.close()


async def test_an_existing_file_keeps_its_mode(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "jobgate.db"
    path.touch(mode=0o640)
    os.chmod(path, 0o640)
    storage = sqlite_store(str(path))
    await storage.open()
    try:
        await storage.migrate()
    finally:
        await storage.close()
    assert mode(path) == 0o640
