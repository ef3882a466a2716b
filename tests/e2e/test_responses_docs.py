"""The examples in docs/responses.md run, as written, against a real `jobgate serve`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobgate.testing.processes import ProcessHarness

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
DOC = Path(__file__).resolve().parents[2] / "docs" / "responses.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def run(code: str, env: dict[str, str], cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_examples_run(tmp_path: Path) -> None:
    quick_start, _webhooks, per_call_key, client_wide_key, *_streaming = blocks()
    with ProcessHarness(tmp_path) as harness:
        serve = harness.start("serve")
        assert serve.url is not None
        env = {
            **os.environ,
            "JOBGATE_URL": serve.url,
            "JOBGATE_API_KEY": harness.default_api_key(serve.url),
        }
        assert run(quick_start, env, tmp_path).strip() == "completed echo: Write the report"
        run(quick_start + per_call_key + "assert response.status == 'queued'\n", env, tmp_path)
        sent = run(
            client_wide_key
            + "response = client.responses.create(model='sim-echo', input='x', background=True)\n"
            + "print(response.id)\n",
            env,
            tmp_path,
        )
        assert sent.startswith("resp_")


def readme_sdk_example() -> str:
    readme = DOC.parents[1] / "README.md"
    examples: list[str] = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.DOTALL)
    (example,) = [
        code for code in examples if "openai.OpenAI(" in code and "responses.create" in code
    ]
    return example


def test_the_readme_sdk_example_runs(tmp_path: Path) -> None:
    with ProcessHarness(tmp_path) as harness:
        serve = harness.start("serve")
        assert serve.url is not None
        env = {**os.environ, "JOBGATE_API_KEY": harness.default_api_key(serve.url)}
        example = readme_sdk_example().replace("http://127.0.0.1:8000", serve.url)
        assert serve.url in example
        printed = run(
            example + "print(client.responses.retrieve(response.id).status)\n", env, tmp_path
        )
        assert printed.splitlines() == ["completed echo: Write the report", "completed"]
