"""A real `jobgate serve --roles worker,reaper,batches` process is SIGKILLed while a batch
expands and runs, then started again: every line ends exactly once, in the output
file, with one job per line. On SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from jobgate.clock import SystemClock
from jobgate.config import Settings
from jobgate.ids import RandomIds
from jobgate.services.batches import BatchService
from jobgate.services.files import FileService
from jobgate.storage.factory import storage_for_url
from jobgate.storage.protocol import Storage
from tests.e2e.gateway import eventually
from tests.storage.helpers import make_tenant

pytestmark = pytest.mark.e2e
JOBGATE = str(Path(sys.executable).with_name("jobgate"))
LINES = 400


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'jobgate.db'}"
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Storage]:
    storage = storage_for_url(database_url)
    await storage.open()
    await storage.migrate()
    yield storage
    await storage.close()


def start(
    tmp_path: Path,
    database_url: str,
    roles: str = "worker,reaper,batches",
    failpoints: str = "",
) -> subprocess.Popen[bytes]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    environment.update(
        JOBGATE_CONFIG=str(tmp_path / "none.toml"),
        JOBGATE_DATABASE_URL=database_url,
        JOBGATE_LEASE_TTL_S="2",
        JOBGATE_HEARTBEAT_INTERVAL_S="0.5",
        JOBGATE_REAPER_INTERVAL_S="0.3",
        JOBGATE_WORKER_POLL_INTERVAL_S="0.1",
        JOBGATE_RETRY_BASE_S="0.1",
        JOBGATE_RETRY_MAX_S="0.2",
        JOBGATE_SHUTDOWN_GRACE_S="1",
        JOBGATE_FAILPOINTS=failpoints,
    )
    (tmp_path / "none.toml").write_text("")
    with (tmp_path / "serve.log").open("ab") as log:
        return subprocess.Popen(
            [JOBGATE, "serve", "--roles", roles],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


async def lines() -> AsyncIterator[bytes]:
    for i in range(LINES):
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": f"n{i}"}],
                "sim": {"latency_s": 0.05}}  # fmt: skip
        line = {"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                "body": body}  # fmt: skip
        yield orjson.dumps(line) + b"\n"


@pytest.mark.timeout(180)
async def test_a_killed_process_loses_and_doubles_nothing(
    tmp_path: Path, database_url: str, db: Storage
) -> None:
    settings = Settings(database_url=database_url)
    ids = RandomIds(SystemClock())
    tenant = await make_tenant(db)
    record = await FileService(storage=db, settings=settings, ids=ids).upload(
        tenant_id=tenant.id, purpose=lambda: "batch", filename="in.jsonl", data=lines()
    )
    batch = await BatchService(storage=db, settings=settings, ids=ids).create(
        tenant_id=tenant.id,
        input_file_id=record.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata=None,
    )
    first = start(tmp_path, database_url)
    try:

        async def some_done() -> bool:
            return (await db.batch_counts(batch_id=batch.id)).completed >= 20

        await eventually(some_done, timeout_s=60)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
    second = start(tmp_path, database_url)
    try:

        async def finished() -> bool:
            found = await db.batch_get(batch_id=batch.id)
            return found is not None and found.status == "completed"

        await eventually(finished, timeout_s=120)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)
    done = await db.batch_get(batch_id=batch.id)
    assert done is not None and done.output_file_id is not None
    assert (done.completed_count, done.failed_count, done.error_file_id) == (LINES, 0, None)
    chunks = await db.file_chunks(file_id=done.output_file_id, from_seq=0, limit=10_000)
    output = [orjson.loads(raw) for c in chunks for raw in c.data.splitlines()]
    assert sorted(line["custom_id"] for line in output) == sorted(f"c{i}" for i in range(LINES))
    jobs = await db.job_list(tenant_id=tenant.id, limit=LINES + 10)
    assert len(jobs) == LINES  # one job per line: nothing doubled by the restart


EXPANDED_LINES = 600
PAD = "x" * 1500  # about 170 lines to a 256 KiB input chunk: the file spans four chunks


async def padded_lines() -> AsyncIterator[bytes]:
    for i in range(EXPANDED_LINES):
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": f"n{i} {PAD}"}]}
        line = {"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                "body": body}  # fmt: skip
        yield orjson.dumps(line) + b"\n"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", ["batch_chunk_jobs_stored", "batch_chunk_committed"])
async def test_a_process_killed_mid_expansion_ends_each_line_in_one_job(
    tmp_path: Path, database_url: str, db: Storage, point: str
) -> None:
    """The process that expands dies on the second input chunk, inside its transaction (its
    jobs written, not yet its lines) or right after its commit; the restarted process goes on
    from the chunk the database holds, and every custom_id ends with exactly one job."""
    settings = Settings(database_url=database_url)
    ids = RandomIds(SystemClock())
    tenant = await make_tenant(db)
    record = await FileService(storage=db, settings=settings, ids=ids).upload(
        tenant_id=tenant.id, purpose=lambda: "batch", filename="in.jsonl", data=padded_lines()
    )
    assert len(await db.file_chunks(file_id=record.id, from_seq=0, limit=10)) >= 3
    batch = await BatchService(storage=db, settings=settings, ids=ids).create(
        tenant_id=tenant.id,
        input_file_id=record.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata=None,
    )
    first = start(tmp_path, database_url, roles="batches", failpoints=f"{point}=kill@2")
    try:
        assert first.wait(timeout=60) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
    midway = await db.batch_counts(batch_id=batch.id)
    assert 0 < midway.items < EXPANDED_LINES  # killed with the batch half expanded
    second = start(tmp_path, database_url)
    try:

        async def finished() -> bool:
            found = await db.batch_get(batch_id=batch.id)
            return found is not None and found.status == "completed"

        await eventually(finished, timeout_s=90)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=20)
    done = await db.batch_get(batch_id=batch.id)
    assert done is not None and done.output_file_id is not None
    assert (done.completed_count, done.failed_count) == (EXPANDED_LINES, 0)
    jobs = await db.job_list(tenant_id=tenant.id, limit=EXPANDED_LINES + 10)
    expected = sorted(f"c{i}" for i in range(EXPANDED_LINES))
    assert sorted(job.metadata["custom_id"] for job in jobs) == expected  # one job a line
    chunks = await db.file_chunks(file_id=done.output_file_id, from_seq=0, limit=10_000)
    output = [orjson.loads(raw) for c in chunks for raw in c.data.splitlines()]
    assert sorted(line["custom_id"] for line in output) == expected
