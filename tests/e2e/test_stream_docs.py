"""The live output streaming examples (docs/responses.md and the README) run, as written,
against a real `jobgate serve`."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from jobgate.testing.processes import ProcessHarness
from tests.e2e.test_responses_docs import run

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[2]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_the_streaming_examples_run(tmp_path: Path) -> None:
    (sdk,) = [b for b in python_blocks(ROOT / "docs" / "responses.md") if "stream=True" in b]
    (native,) = [b for b in python_blocks(ROOT / "README.md") if "client.stream(" in b]
    with ProcessHarness(tmp_path) as harness:
        serve = harness.start("serve")
        assert serve.url is not None
        env = {
            **os.environ,
            "JOBGATE_URL": serve.url,
            "JOBGATE_API_KEY": harness.default_api_key(serve.url),
        }
        assert run(sdk, env, tmp_path) == "echo: Tell me something slowly\n"
        assert run(native, env, tmp_path) == "echo: hello"
