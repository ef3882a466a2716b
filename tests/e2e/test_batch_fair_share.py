"""A tenant's 10,000-line batch and another tenant's interactive jobs at once: a real
`jobgate serve --roles batches` expands the batch, then `serve --roles worker,reaper,batches`
runs it, and the other tenant submits while 9,800 of its jobs are still queued; each
interactive job's queue wait (started_at - run_at) stays within the bound of the fairness
test (tests/e2e/test_fairness.py: 3 s). No provider latency, so the batch
moves as fast as the workers claim. On SQLite and PostgreSQL."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from jobgate.clock import SystemClock
from jobgate.config import Settings
from jobgate.ids import RandomIds
from jobgate.services.batches import BatchService
from jobgate.services.files import FileService
from jobgate.storage.protocol import Storage
from tests.e2e.gateway import eventually
from tests.e2e.test_batch_kill import database_url, db, start
from tests.storage.helpers import make_tenant, new_job, submit_one

__all__ = ["database_url", "db"]  # fixtures shared with the kill test

pytestmark = pytest.mark.e2e
LINES = 10_000
INTERACTIVE = 12
QUEUE_WAIT_BOUND_S = 3.0  # tests/e2e/test_fairness.py's bound for the small tenant


async def lines() -> AsyncIterator[bytes]:
    for i in range(LINES):
        body = {"model": "sim-echo", "messages": [{"role": "user", "content": f"n{i}"}]}
        line = {"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                "body": body}  # fmt: skip
        yield orjson.dumps(line) + b"\n"


@pytest.mark.timeout(90)
async def test_interactive_jobs_wait_no_longer_beside_a_big_batch(
    tmp_path: Path, database_url: str, db: Storage
) -> None:
    settings = Settings(database_url=database_url)
    ids = RandomIds(SystemClock())
    bulk = await make_tenant(db, "bulk")
    other = await make_tenant(db, "other")
    record = await FileService(storage=db, settings=settings, ids=ids).upload(
        tenant_id=bulk.id, purpose=lambda: "batch", filename="in.jsonl", data=lines()
    )
    batch = await BatchService(storage=db, settings=settings, ids=ids).create(
        tenant_id=bulk.id,
        input_file_id=record.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata=None,
    )
    # The batch expands first, so that its 10,000 jobs are all queued ahead of the others.
    expander = start(tmp_path, database_url, roles="batches")
    try:

        async def expanded() -> bool:
            return (await db.batch_counts(batch_id=batch.id)).items == LINES

        await eventually(expanded, timeout_s=45)
    finally:
        expander.send_signal(signal.SIGTERM)
        expander.wait(timeout=20)
    server = start(tmp_path, database_url)
    try:

        async def batch_running() -> bool:
            return (await db.batch_counts(batch_id=batch.id)).completed >= 200

        await eventually(batch_running, timeout_s=30)
        job_ids = []
        for _ in range(INTERACTIVE):
            # At the batch's own priority: only the fair share across tenants, not priority,
            # can put them ahead of the 9,800 batch jobs queued before them.
            outcome = await submit_one(db, job=new_job(other, priority=batch.priority))
            job_ids.append(outcome.job.id)

        async def interactive_done() -> bool:
            jobs = [await db.job_get(job_id=job_id) for job_id in job_ids]
            return all(job is not None and job.started_at is not None for job in jobs)

        await eventually(interactive_done, timeout_s=30)
        counts = await db.batch_counts(batch_id=batch.id)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
    waits = []
    for job_id in job_ids:
        job = await db.job_get(job_id=job_id)
        assert job is not None and job.started_at is not None
        waits.append((job.started_at - job.run_at).total_seconds())
    print(
        f"\ninteractive queue wait beside a {LINES}-line batch: max {max(waits):.3f} s,"
        f" batch then {counts.completed} done / {counts.live} live"
    )
    assert max(waits) < QUEUE_WAIT_BOUND_S
    assert counts.live > 0  # the batch was still queued work when the last interactive ran
