"""The README's first screen: `jobgate serve` on a fresh directory, then curl-like calls."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_serve_submit_poll_long_poll_cancel(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "JOBGATE_SHUTDOWN_GRACE_S": "0",
    }
    env.pop("JOBGATE_DATABASE_URL", None)
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
        saved = json.loads((tmp_path / "config/jobgate/credentials.json").read_text())
        assert saved[url]["api_key"] == key
        assert (tmp_path / "jobgate.db").exists()
        assert saved[url]["database_url"] == f"sqlite:///{tmp_path / 'jobgate.db'}"
        same_server_elsewhere(env, url.replace("127.0.0.1", "localhost"), key, tmp_path)
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            quick = http.post(
                "/v1/jobs",
                json={
                    "endpoint": "/v1/chat/completions",
                    "body": {
                        "model": "sim-echo",
                        "messages": [{"role": "user", "content": "hello"}],
                    },
                },
            )
            assert quick.status_code == 202
            done = http.get(f"/v1/jobs/{quick.json()['id']}", params={"wait": 20})
            for _ in range(20):
                if done.json()["status"] == "succeeded":
                    break
                done = http.get(f"/v1/jobs/{quick.json()['id']}", params={"wait": 20})
            assert done.json()["status"] == "succeeded"
            assert "echo: hello" in json.dumps(done.json()["result"])
            slow = http.post(
                "/v1/jobs",
                json={
                    "endpoint": "/v1/chat/completions",
                    "body": {
                        "model": "sim-echo",
                        "messages": [{"role": "user", "content": "slow"}],
                        "sim": {"latency_s": 60},
                    },
                },
            ).json()
            running = http.get(f"/v1/jobs/{slow['id']}", params={"wait": 10}).json()
            assert running["status"] == "running"
            started = time.monotonic()
            cancelled = http.post(f"/v1/jobs/{slow['id']}/cancel").json()
            assert cancelled["cancel_requested_at"] is not None
            final = http.get(f"/v1/jobs/{slow['id']}", params={"wait": 10}).json()
            assert final["status"] == "cancelled" and time.monotonic() - started < 10
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, errors_text = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            _, errors_text = process.communicate()
    assert process.returncode == 0, errors_text
    assert key not in errors_text  # logs never hold the API key


def same_server_elsewhere(env: dict[str, str], url: str, key: str, tmp_path: Path) -> None:
    """From another directory, by another name of the same server: the client finds its key
    and the operator commands its database, and no empty jobgate.db appears there."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def jobgate(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobgate.cli", *args],
            cwd=elsewhere,
            env={**env, "JOBGATE_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert jobgate("key").stdout.strip() == key
    shown = jobgate("tenants", "show", "default", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tenant"] == "default"
    assert not (elsewhere / "jobgate.db").exists()
