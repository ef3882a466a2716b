"""The benchmark harness's smallest jobgate-only run, end to end, so that it cannot rot: every
section measures something and the report is written. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_run_measures_every_jobgate_section(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    done = subprocess.run(
        [
            sys.executable, "-m", "bench", "--jobgate-only", "--size", "smoke",
            "--backends", "sqlite", "--results-dir", str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((tmp_path / "latest.json").read_text())
    cases = results["cases"]
    measured = {(c["section"], c["name"]) for c in cases if c["error"] is None}
    assert {
        ("drain", "drain"),
        ("enqueue", "single"),
        ("http", "submit"),
        ("http", "status"),
        ("longpoll", "wake"),
        ("longpoll", "memory"),
        ("inflight", "hold"),
    } <= measured, [c for c in cases if c["error"]]
    drain = next(c for c in cases if c["section"] == "drain")
    assert drain["metrics"]["jobs"] == 200 and drain["metrics"]["failed"] == 0
    assert drain["metrics"]["events_per_job"] == 3  # queued, running, succeeded: the log is on
    submit = next(c for c in cases if c["section"] == "http" and c["name"] == "submit")
    assert submit["metrics"]["errors"] == 0 and submit["metrics"]["p99_ms"] is not None
    held = next(c for c in cases if c["section"] == "inflight")
    assert held["metrics"]["calls"] == 100 and held["metrics"]["rss_mib"] > 0
    memory = next(c for c in cases if c["name"] == "memory")
    assert memory["metrics"]["held"] == memory["metrics"]["clients"]
    assert memory["metrics"]["answered_early"] == 0
    # Every row is there, measured or saying why not (no webhook benchmark in this build).
    batched = next(c for c in cases if c["name"] == "batched")
    assert batched["error"] or batched["metrics"]["jobs"] == 100
    assert any(c["section"] == "webhooks" for c in cases)
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    report = (run_dir / "benchmarks.md").read_text()
    assert "## Targets\n" in report and "SQLite drain" in report
    # The load generator's floor is measured beside the servers, and the host's speed recorded.
    floor = [c for c in cases if c["system"] == "null-server" and c["error"] is None]
    assert {c["name"] for c in floor} == {"submit", "status"}
    assert all(c["metrics"]["errors"] == 0 for c in floor)
    for probes in (results["machine"]["probes_at_start"], results["run"]["probes_at_end"]):
        assert probes["python_loop_s"] > 0 and probes["fsync"]["p90_ms"] >= 0
    assert "Host speed at the start: a fixed Python loop" in report
    assert "| target | goal | measured |" in done.stdout
