"""What a terminal shows when a server starts: the banner once its checks passed (only their log
lines before it), then keys, then log lines; and the access log when asked for."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.processes import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_banner_first_then_an_access_log_line_per_request(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env.update(
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        JOBGATE_LOG_LEVEL="info",  # migrations and role starts log at info
        JOBGATE_LOG_FORMAT="json",
        JOBGATE_ACCESS_LOG="1",
    )
    port = free_port()
    with subprocess.Popen(
        [sys.executable, "-m", "jobgate", "serve", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, as on a terminal
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            first = server.stdout.readline()
            while first.startswith("{"):  # log lines of the checks before it (migrations)
                first = server.stdout.readline()
            assert first.startswith("jobgate ") and f"listening on http://127.0.0.1:{port}" in first
            lines: list[str] = []
            while not any("Operator key" in line for line in lines):
                lines.append(server.stdout.readline())
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
            access = None
            while access is None:
                line = server.stdout.readline()
                assert line, "the server ended"
                if line.startswith("{") and json.loads(line).get("path") == "/healthz":
                    access = json.loads(line)
            assert access["logger"] == "jobgate.access" and access["method"] == "GET"
            assert access["status_code"] == 200 and access["latency_ms"] >= 0
        finally:
            server.terminate()
            server.wait(timeout=30)


def test_two_local_servers_keep_their_own_saved_keys(tmp_path: Path) -> None:
    """Each `serve` saves its tenant and operator keys under its own URL, mode 0600."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    urls = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        port = free_port()
        with subprocess.Popen(
            [sys.executable, "-m", "jobgate", "serve", "--port", str(port)],
            cwd=tmp_path / name,  # its own jobgate.db
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as server:
            try:
                assert server.stdout is not None
                while "Operator key" not in server.stdout.readline():
                    pass
            finally:
                server.terminate()
                server.wait(timeout=30)
        urls.append(f"http://127.0.0.1:{port}")
    path = tmp_path / "config" / "jobgate" / "credentials.json"
    saved = json.loads(path.read_text())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for url in urls:
        assert saved[url]["api_key"].startswith("jg_")
        assert saved[url]["operator_key"].startswith("jgo_")
    assert saved[urls[0]]["api_key"] != saved[urls[1]]["api_key"]


def test_an_api_without_a_reconciler_warns_when_a_provider_runs_in_background(
    tmp_path: Path,
) -> None:
    (tmp_path / "jobgate.toml").write_text('[providers.bg]\nkind = "sim"\nmode = "background"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), JOBGATE_LOG_FORMAT="json")
    port = free_port()
    with subprocess.Popen(
        [sys.executable, "-m", "jobgate", "api", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            warning = None
            while warning is None:
                line = server.stdout.readline()
                assert line, "the api ended"
                if line.startswith("{") and json.loads(line)["level"] == "warning":
                    warning = json.loads(line)
            assert warning["logger"] == "jobgate.startup"
            assert "no reconciler has ever run" in warning["message"]
            assert "bg runs in background mode" in warning["message"]
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
            assert ready["warnings"] == [warning["message"].removesuffix("; start one")]
        finally:
            server.terminate()
            server.wait(timeout=30)
