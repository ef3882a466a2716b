"""The soak's short variant (bench/soak.py, docs/reliability.md "The soak"): a run that mixes
plain, streaming, background, batch, keyed and rate-limited jobs while it kills workers, batch
runners, reconcilers and dispatchers and cuts the workers' database link: over the database
transport with a PostgreSQL crash restart (in CI), and a very short one over RabbitMQ whose
connections are cut (on demand: `slow`). It fails when any invariant the soak checks is broken,
printing what broke and the soak's verdict on each unfinished job. The long runs, one per
transport, are in docs/reliability.md; Redis and SQS are left to them (and to the transport
fixture's crash scenarios) to keep this under a minute and a half."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import pgcluster
from tests.transports.brokers import require

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SHORT = [
    "--rate", "5", "--workers", "2", "--batch-runners", "1", "--link-cut-s", "2",
    "--batch-lines", "10", "--batch-cancel-share", "0.5", "--settle-timeout-s", "120",
    "--grace-s", "3", "--json",
]  # fmt: skip
RUNS = {
    # One link cut each, refused: a blackholed one strands the connections it held until
    # their statements time out (60 s), longer than this test should take.
    # Half its streaming jobs meet a fault inside their stream (rate limit, server error,
    # overload, quota, stall: bench/soak_stream_faults.py), streamed from the simulator.
    "database": [
        "--duration", "20", "--kill-every", "5", "--pg-restart-every", "8",
        "--link-cut-every", "15", "--batch-every", "5", "--seed", "40",
        "--stream-faults", "0.5",
    ],
    "amqp": [
        "--duration", "10", "--kill-every", "4", "--pg-restart-every", "0",
        "--link-cut-every", "7", "--broker-fault-every", "5", "--broker-outage-s", "1",
        "--batch-every", "4", "--seed", "41",
    ],
}  # fmt: skip


# Over RabbitMQ on demand (`slow`, about 30 s), like Redis and SQS: its faults are the transport
# fixture's crash scenarios in CI (tests/e2e/test_worker_crashes_postgres.py and
# tests/e2e/test_database_faults_postgres.py [amqp], tests/transports/test_processes.py and
# test_transports.py's broker flushed and connections cut [amqp]); the invariants are the
# database run's.
@pytest.mark.parametrize(
    "transport", [pytest.param(t, marks=[pytest.mark.slow] if t == "amqp" else []) for t in RUNS]
)
def test_a_short_soak_breaks_no_invariant_postgres(tmp_path: Path, transport: str) -> None:
    if not pgcluster.available():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    if transport == "amqp":
        require("RabbitMQ", "127.0.0.1", 5672)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    command = ["-m", "bench.soak", "--transport", transport, *SHORT, *RUNS[transport]]
    done = subprocess.run(
        [sys.executable, *command, "--keep", str(tmp_path / "soak")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.stdout.strip(), done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    broken = {name: result.get(name) for name in result["broken"]}
    verdicts = {k: v for k, v in result.items() if k.endswith(("_jobs", "_sample", "_starts"))}
    assert result["ok"], f"broken: {broken}; details: {verdicts}"
    assert done.returncode == 0, done.stderr[-4000:]
    # The run did what it says: every kind of job, batches, and each fault.
    assert set(result["accepted_by_kind"]) == {"plain", "stream", "background", "keyed", "limited"}
    assert result["batches"] >= 2 and result["streams_checked"] > 0
    assert sum(result["kills"].values()) >= 2 and sum(result["database_link_cuts"].values()) >= 1
    if transport == "database":
        assert result["postgres_restarts"] >= 1
        assert result["stream_fault_jobs"] >= 3 and result["stream_faults_checked"] >= 1
    else:
        assert result["broker_faults"] >= 1
