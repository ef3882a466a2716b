"""Hot reload of limits: a running `jobgate serve` picks up a changed rpm from its
configuration file (its mtime, checked every second) without a restart, and refuses a
broken file while keeping the limits it runs with."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.e2e.support import Api, job_body
from tests.support.processes import ProcessHarness, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

LIMITED = """
[providers.sim]
kind = "sim"
model_prefixes = ["sim-"]
rpm = {rpm}
"""


def _rewrite(path: Path, text: str) -> None:
    """Write and move the mtime on, even on a file system with coarse timestamps."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    if path.stat().st_mtime_ns == before:
        time.sleep(0.01)
        path.touch()


def _finish_times(api: Api, ids: list[str]) -> list[float]:
    def done() -> list[float] | None:
        jobs = [api.get(job_id) for job_id in ids]
        if all(job["status"] == "succeeded" for job in jobs):
            return sorted(float(job["started_at"]) for job in jobs)
        return None

    return wait_until(done, timeout_s=60, interval_s=0.1, what="the jobs to succeed")


def test_a_changed_rpm_applies_to_a_running_serve(harness: ProcessHarness, tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(LIMITED.format(rpm=30))  # one start every 2 s
    harness.env.update(
        JOBGATE_DATABASE_URL=f"sqlite:///{tmp_path / 'jobgate.db'}", JOBGATE_CONFIG=str(config)
    )
    serve = harness.start("serve")
    assert serve.url is not None
    created = harness.run("tenants", "create", "acme", "--json")
    api = Api(serve.url, json.loads(created.stdout)["api_key"])

    slow = _finish_times(api, [api.submit(job_body(f"slow {n}")) for n in range(3)])
    assert slow[-1] - slow[0] >= 3.5  # 3 starts, 2 s apart

    _rewrite(config, LIMITED.format(rpm=6000))  # 100 a second
    wait_until(
        lambda: serve.log_lines_matching("configuration reloaded"),
        timeout_s=20,
        what="the reload",
    )
    fast = _finish_times(api, [api.submit(job_body(f"fast {n}")) for n in range(10)])
    assert fast[-1] - fast[0] < 2.0  # at 30 rpm, 10 starts would take 18 s

    _rewrite(config, "[providers.sim]\nkind = 'sim'\nrpm = -1\n")  # refused
    wait_until(
        lambda: serve.log_lines_matching("configuration not reloaded"),
        timeout_s=20,
        what="the refusal",
    )
    again = _finish_times(api, [api.submit(job_body(f"again {n}")) for n in range(10)])
    assert again[-1] - again[0] < 2.0  # the last good limits stay
    assert serve.alive
