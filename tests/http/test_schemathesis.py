"""Schemathesis against a live server's /openapi.json with every check (conformance of status
codes, content types, headers and bodies; negative data rejected and positive data accepted;
auth not ignored; Allow headers; use after free; stateful sequences through inferred links).

The seed is fixed so that CI is reproducible; JOBGATE_FUZZ_SEED and JOBGATE_FUZZ_EXAMPLES
explore further on demand."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import ProcessHarness

HERE = Path(__file__).parent


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_openapi_contract_holds_under_schemathesis(tmp_path: Path) -> None:
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli is not None, "schemathesis is a dev dependency"
    env = {"JOBGATE_DATABASE_URL": f"sqlite:///{tmp_path}/jobgate.db"}
    with ProcessHarness(tmp_path, env=env) as harness:
        serve = harness.start("serve")
        assert serve.url is not None
        key = harness.default_api_key(serve.url)
        result = subprocess.run(
            [
                cli,
                "--config-file",
                str(HERE / "schemathesis.toml"),
                "run",
                f"{serve.url}/openapi.json",
                "--checks",
                "all",
                "--header",
                f"Authorization: Bearer {key}",
                "--max-examples",
                os.environ.get("JOBGATE_FUZZ_EXAMPLES", "50"),
                "--seed",
                os.environ.get("JOBGATE_FUZZ_SEED", "20261130"),
                "--no-color",
            ],
            capture_output=True,
            text=True,
            timeout=560,
            check=False,
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
        assert serve.alive
        assert not serve.log_lines_matching('"level":"error"'), serve.tail()
