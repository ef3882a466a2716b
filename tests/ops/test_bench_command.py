"""The benchmark is a checkout's tool, not a product command: `python -m bench` runs it, and the
installed `jobgate` command neither offers `bench` nor imports a `bench/` package from the
directory it runs in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_jobgate_has_no_bench_command_even_inside_a_checkout() -> None:
    refused = _run("-m", "jobgate.cli", "bench", "--help", cwd=ROOT)
    assert refused.returncode == 2, refused.stdout
    assert "No such command 'bench'" in refused.stderr
    listed = _run("-m", "jobgate.cli", "--help", cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    assert "  bench" not in listed.stdout


def test_the_jobgate_command_never_imports_a_bench_package_from_the_working_directory(
    tmp_path: Path,
) -> None:
    planted = tmp_path / "bench"
    planted.mkdir()
    (planted / "__init__.py").write_text("raise SystemExit('bench/ was imported')\n")
    (planted / "runner.py").write_text("raise SystemExit('bench/ was imported')\n")
    for args in (("--help",), ("bench",), ("bench", "--help")):
        done = _run("-m", "jobgate.cli", *args, cwd=tmp_path)
        assert "bench/ was imported" not in done.stdout + done.stderr, args


def test_python_m_bench_runs_the_harness_with_its_options() -> None:
    shown = _run("-m", "bench", "--help", cwd=ROOT)
    assert shown.returncode == 0, shown.stderr
    assert "python -m bench" in shown.stdout
    for option in ("--jobgate-only", "--size", "--only", "--backends", "--results-dir"):
        assert option in shown.stdout
