"""The examples in docs/client.md run, as written, against a real `jobgate serve`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.server import JobgateServer

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def env_for(served: JobgateServer) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return served.env(JOBGATE_URL=served.url, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_the_ten_line_example_fits_and_runs(served: JobgateServer, tmp_path: Path) -> None:
    example = blocks("python")[0]
    assert len(example.strip().splitlines()) <= 10
    result = subprocess.run(
        [sys.executable, "-c", example],
        env=env_for(served),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.splitlines()
    assert re.fullmatch(r"job_\w+ queued", first)
    assert second == "succeeded echo: hello"


def test_the_other_python_examples_run(served: JobgateServer, tmp_path: Path) -> None:
    for example in blocks("python")[1:]:
        result = subprocess.run(
            [sys.executable, "-c", example],
            env=env_for(served),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr


@pytest.mark.timeout(300)  # a dozen CLI processes on a shared machine
def test_the_cli_session_pastes_and_runs(served: JobgateServer, tmp_path: Path) -> None:
    serve, session = blocks("sh")[:2]  # the later ones are the search recipes
    assert serve.strip().startswith("jobgate serve")
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", session],
        env=env_for(served),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "echo: hello, jobgate" in result.stdout
    assert "exit code 3" in result.stdout
    assert "redriven: queued" in result.stdout
