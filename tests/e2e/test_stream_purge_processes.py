"""Deleting a streaming job while its worker streams, with the API and the worker in separate
processes (on SQLite the worker hears of the cancel only at its next heartbeat): the purge
fences the output log, so no chunk is stored after it, and the job ends `cancelled` without
waiting for its lease to run out. On both stores."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.e2e.support import job_body
from tests.support.processes import ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

# A worker that renews (and so reads cancel requests) seldom, with a lease long enough that
# the reaper cannot be what ends the job within the test's wait.
SLOW_HEARTBEAT = {"JOBGATE_HEARTBEAT_INTERVAL_S": "4", "JOBGATE_LEASE_TTL_S": "30"}


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'jobgate.db'}"
    return str(request.getfixturevalue("pg_dsn"))


def _stored_chunks(database_url: str, job_id: str) -> int:
    """Rows of the job's output log, read from the database itself (a purged job's stream
    shows none whatever is stored)."""
    if database_url.startswith("sqlite:///"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as conn:
            (rows,) = conn.execute(
                "SELECT count(*) FROM job_output_chunks WHERE job_id = ?", (job_id,)
            ).fetchone()
            return int(rows)

    async def count() -> int:
        conn = await asyncpg.connect(database_url)
        try:
            found = await conn.fetchval(
                "SELECT count(*) FROM job_output_chunks WHERE job_id = $1", job_id
            )
            return int(found)
        finally:
            await conn.close()

    return asyncio.run(count())


def test_a_deleted_streaming_job_stores_no_output_after_the_purge(
    harness: ProcessHarness, database_url: str
) -> None:
    harness.env["JOBGATE_DATABASE_URL"] = database_url
    harness.run("migrate")
    key = harness.create_tenant("acme")
    api = harness.start("api")
    harness.start("worker", env=SLOW_HEARTBEAT)
    assert api.url is not None
    with httpx.Client(
        base_url=api.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as http:
        body = {**job_body("a prompt to forget", latency_s=8.0, chunks=80), "stream": True}
        submitted = http.post("/v1/jobs", json=body)
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        wait_until(
            lambda: _stored_chunks(database_url, job_id) > 0,
            timeout_s=30,
            what="the first chunk streamed",
        )
        deleted = http.delete(f"/v1/jobs/{job_id}")
        assert deleted.status_code == 200, deleted.text

        def ended() -> bool:
            job = http.get(f"/v1/jobs/{job_id}").json()
            return bool(job["status"] == "cancelled")

        # Sooner than a lease expiry could end it: the fenced append tells the worker.
        wait_until(ended, timeout_s=10, what="the deleted job cancelled")
    assert _stored_chunks(database_url, job_id) == 0
