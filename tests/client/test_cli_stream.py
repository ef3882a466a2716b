"""`jobgate submit --stream` as a real process against a real `jobgate serve`: the output's
first words are printed while the job still runs, the whole text by the end, and the exit
code is the job's outcome."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.client.server import JOBGATE, JobgateServer

pytestmark = pytest.mark.e2e
BODY = {
    "model": "sim-echo",
    "messages": [{"role": "user", "content": "words that arrive one by one"}],
    "sim": {"latency_s": 2.0, "chunks": 8},
}


def test_submit_stream_prints_tokens_as_they_come(served: JobgateServer) -> None:
    path = served.workdir / "slow.json"
    path.write_text(json.dumps(BODY))
    started = time.monotonic()
    process = subprocess.Popen(
        [*JOBGATE, "submit", str(path), "--stream", "-q"],
        env=served.env(JOBGATE_URL=served.url),
        cwd=served.workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.read1(64)  # type: ignore[attr-defined]
        first_at = time.monotonic() - started
        rest, errors = process.communicate(timeout=60)
    finally:
        process.kill()
    finished_at = time.monotonic() - started
    assert process.returncode == 0, errors
    assert first and first_at < finished_at - 0.8  # printed live, not at the end
    assert (first + rest).decode() == "echo: words that arrive one by one\n"


def test_submit_stream_exits_with_the_outcome(served: JobgateServer) -> None:
    path = served.workdir / "failing.json"
    path.write_text(json.dumps({**BODY, "sim": {"fail_with": "invalid_request"}}))
    result = subprocess.run(
        [*JOBGATE, "submit", str(path), "--stream", "--max-attempts", "1"],
        env=served.env(JOBGATE_URL=served.url),
        cwd=served.workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("simulated invalid request")
