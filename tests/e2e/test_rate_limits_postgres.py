"""Shared rate limits across real worker processes (issue 19): two `jobgate worker` processes
on PostgreSQL with `rpm = 600` for the simulator start at most 10 calls a second together (+1
on a window's edge), not 10 each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from jobgate.testing.processes import ProcessHarness
from tests.e2e.support import Api, create_tenant, job_body, wait_settled

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

CONFIG = """
[providers.sim]
kind = "sim"
model_prefixes = ["sim-"]
rpm = 600
"""


def _starts(dsn: str, ids: list[str]) -> list[tuple[float, str]]:
    async def read() -> list[tuple[float, str]]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT extract(epoch FROM started_at)::float8 AS t, "
                "(SELECT actor FROM job_events e WHERE e.job_id = j.id AND e.to_state = 'running'"
                " ORDER BY seq LIMIT 1) AS worker FROM jobs AS j WHERE id = ANY($1::text[])",
                ids,
            )
        finally:
            await conn.close()
        return sorted((row["t"], row["worker"]) for row in rows)

    return asyncio.run(read())


def test_two_worker_processes_share_one_rpm(
    harness: ProcessHarness, pg_dsn: str, tmp_path: Path
) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(CONFIG)
    harness.env.update(JOBGATE_DATABASE_URL=pg_dsn, JOBGATE_CONFIG=str(config))
    api_process = harness.start("api")
    assert api_process.url is not None
    api = Api(api_process.url, create_tenant(pg_dsn, "acme"))
    ids = [api.submit(job_body(f"job {n}")) for n in range(30)]
    harness.start("worker")
    harness.start("worker")
    wait_settled(pg_dsn, ids, timeout_s=60)
    starts = _starts(pg_dsn, ids)
    times = [t for t, _ in starts]
    most = max(sum(1 for u in times if t <= u < t + 1.0) for t in times)
    assert most <= 11, most
    assert len({worker for _, worker in starts}) == 2  # both processes took part
    assert times[-1] - times[0] >= 2.5  # 30 calls at 10 a second, not all at once
