"""Limits per end user across real worker processes: two `jobgate worker` processes on
PostgreSQL with `rpm_per_key = 600` for the tenant start each concurrency key's jobs at least
60 / 600 s apart together (one shared bucket per key, not one per process), while both take
part; and a key over its daily budget per key waits with `waiting.reason` naming it while the
other keys are worked."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from pathlib import Path

import asyncpg
import pytest

from tests.e2e.support import Api, create_tenant, job_body, wait_settled
from tests.support.processes import ProcessHarness

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SPACING_S = 60 / 600


def _starts(dsn: str, ids: list[str]) -> list[tuple[float, str | None, str]]:
    """(started_at in Unix seconds, concurrency key, worker process) of each job."""

    async def read() -> list[tuple[float, str | None, str]]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT extract(epoch FROM started_at)::float8 AS t, concurrency_key AS key, "
                "(SELECT actor FROM job_events e WHERE e.job_id = j.id AND e.to_state = 'running'"
                " ORDER BY seq LIMIT 1) AS worker FROM jobs AS j WHERE id = ANY($1::text[])",
                ids,
            )
        finally:
            await conn.close()
        return sorted(((row["t"], row["key"], row["worker"]) for row in rows), key=lambda r: r[0])

    return asyncio.run(read())


def _keyed(key: str | None, n: int) -> dict[str, object]:
    body = job_body(f"job {n}")
    return body if key is None else {**body, "concurrency_key": key}


def test_two_worker_processes_share_each_keys_rpm(
    harness: ProcessHarness, pg_dsn: str, tmp_path: Path
) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text("[tenants.acme]\nrpm_per_key = 600\n")
    harness.env.update(JOBGATE_DATABASE_URL=pg_dsn, JOBGATE_CONFIG=str(config))
    api_process = harness.start("api")
    assert api_process.url is not None
    api = Api(api_process.url, create_tenant(pg_dsn, "acme"))
    workers = [harness.start("worker", ready=False) for _ in range(2)]
    for worker in workers:
        worker.wait_ready()
    ids = [api.submit(_keyed(key, n)) for n in range(15) for key in ("alice", "bob", None)]
    facts = wait_settled(pg_dsn, ids, timeout_s=90)
    assert {f.state for f in facts.values()} == {"succeeded"}
    by_key: dict[str | None, list[float]] = defaultdict(list)
    starts = _starts(pg_dsn, ids)
    for started, key, _ in starts:
        by_key[key].append(started)
    for key in ("alice", "bob"):
        times = by_key[key]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert len(times) == 15 and min(gaps) >= SPACING_S - 1e-6, (key, gaps)
    assert len(by_key[None]) == 15  # jobs without a key: no bucket, no spacing asked
    assert len({worker for _, _, worker in starts}) == 2  # both processes took part


def test_a_key_over_its_token_budget_waits_naming_it_while_others_run(
    harness: ProcessHarness, pg_dsn: str, tmp_path: Path
) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text("[tenants.acme]\ndaily_token_budget_per_key = 1\n")
    harness.env.update(JOBGATE_DATABASE_URL=pg_dsn, JOBGATE_CONFIG=str(config))
    api_process = harness.start("api")
    assert api_process.url is not None
    api = Api(api_process.url, create_tenant(pg_dsn, "acme"))
    harness.start("worker")
    harness.start("worker")
    first = api.submit(_keyed("alice", 0))
    wait_settled(pg_dsn, [first], timeout_s=60)  # its usage (more than 1 token) billed
    # Due once every worker's budget sum (at most 2 s old) counts the first job's usage; the
    # others due later still, so that when they have run, the held job was claimable too.
    held = api.submit({**_keyed("alice", 1), "delay_s": 4})
    others = [api.submit({**_keyed(key, 2), "delay_s": 6}) for key in ("bob", None)]
    wait_settled(pg_dsn, others, timeout_s=60)
    view = api.get(held)
    assert view["status"] == "queued", view
    assert view["waiting"]["reason"] == "budget_exhausted"
    assert "daily_token_budget_per_key" in view["waiting"]["detail"]
    assert "'alice'" in view["waiting"]["detail"]
