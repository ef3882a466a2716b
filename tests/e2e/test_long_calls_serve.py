"""SLOW (about 35 s): a default `jobgate serve` (a fresh directory, SQLite, the built-in
simulator, no configuration) runs 100 thirty-second calls at once, as a new user would try it.

With the old default of 16 slots the last of them finished after about 3 minutes."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

JOBS = 100
LATENCY_S = 30


def _body(index: int) -> dict[str, Any]:
    return {
        "endpoint": "/v1/chat/completions",
        "body": {
            "model": "sim-echo",
            "messages": [{"role": "user", "content": f"long call {index}"}],
            "sim": {"latency_s": LATENCY_S},
        },
    }


async def _submit_all(url: str, key: str) -> list[str]:
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=JOBS)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30, limits=limits) as http:
        answers = await asyncio.gather(*(http.post("/v1/jobs", json=_body(i)) for i in range(JOBS)))
    assert [a.status_code for a in answers] == [202] * JOBS, [a.text for a in answers[:3]]
    return [str(a.json()["id"]) for a in answers]


def _count(http: httpx.Client, status: str) -> int:
    answer = http.get("/v1/jobs", params={"status": status, "limit": 100})
    assert answer.status_code == 200, answer.text
    return len(answer.json()["data"])


def test_default_serve_runs_100_thirty_second_calls_at_once(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    for name in list(env):
        if name.startswith("JOBGATE_"):  # nothing but the defaults
            env.pop(name)
    process = subprocess.Popen(
        [sys.executable, "-m", "jobgate.cli", "serve", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", banner)
        assert match, banner
        url = match.group(1)
        lines = [process.stdout.readline() for _ in range(3)]
        key = next(line.strip() for line in lines if line.strip().startswith("jg_"))
        started = time.monotonic()
        ids = asyncio.run(_submit_all(url, key))
        submitted_s = time.monotonic() - started
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            # All at once: every call running before the first one ends (30 s after it
            # began), however long a loaded machine takes to submit and claim them.
            while (running := _count(http, "running")) < JOBS:
                assert _count(http, "succeeded") == 0, f"one ended with {running} running"
                time.sleep(0.2)
            all_running_s = time.monotonic() - started
            while _count(http, "succeeded") < JOBS:
                assert time.monotonic() - started < all_running_s + LATENCY_S + 60, (
                    f"{_count(http, 'succeeded')} of {JOBS} succeeded after "
                    f"{time.monotonic() - started:.0f} s"
                )
                time.sleep(0.5)
            finished_s = time.monotonic() - started
            jobs = [http.get(f"/v1/jobs/{job_id}").json() for job_id in ids]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, errors_text = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, errors_text = process.communicate()
    assert process.returncode == 0, errors_text
    print(f"submitted in {submitted_s:.1f} s, all running at {all_running_s:.1f} s, "
          f"all succeeded at {finished_s:.1f} s")  # fmt: skip
    for job in jobs:
        assert job["status"] == "succeeded" and job["attempt"] == 1, job
        # Each waited on its provider the whole 30 s, and none waited for a slot first (a
        # slot frees only when a call ends: a job that waited for one started 30 s late).
        assert job["completed_at"] - job["started_at"] >= LATENCY_S - 1
        assert job["started_at"] - job["created_at"] < LATENCY_S / 2
