"""The README's install routes, offline: a wheel built from this checkout (`pip wheel --no-deps
-w dist .`) installed into a new virtual environment, then `jobgate serve` from it answers a
job and serves its API docs; and the clone route's editable install is the one the tests run in.

The dependencies come from this test's environment (a `.pth` file), since there is no index
offline; what is checked is the wheel itself: its files, its entry point, its packaged data."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.e2e import doc_blocks
from tests.support.processes import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def run(*command: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [str(part) for part in command],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{command}: {result.stdout}\n{result.stderr}"
    return result.stdout


def test_the_readme_shows_both_install_routes() -> None:
    readme = doc_blocks.parse(doc_blocks.ROOT / "README.md")
    installs = " ".join(block.code for block in readme if "pip install" in block.code)
    assert "pip install -e ." in installs  # the clone
    assert re.search(r"pip install 'dist/jobgate-[\d.]+-py3-none-any\.whl\[openai\]'", installs)
    assert "jobgate[openai,otel]" in installs


def test_a_wheel_of_this_checkout_installs_and_serves(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
        "-w", dist, doc_blocks.ROOT)  # fmt: skip
    (wheel,) = dist.glob("jobgate-*.whl")
    assert re.fullmatch(r"jobgate-[\d.]+-py3-none-any\.whl", wheel.name)
    readme = (doc_blocks.ROOT / "README.md").read_text()
    assert f"dist/{wheel.name}" in readme  # the README names the file the build makes
    names = set(zipfile.ZipFile(wheel).namelist())
    for dialect in ("sqlite", "postgres"):
        migrations = {n for n in names if n.startswith(f"jobgate/storage/{dialect}/migrations/")}
        shipped = sorted(
            (doc_blocks.ROOT / f"src/jobgate/storage/{dialect}/migrations").glob("*.sql")
        )
        assert {f"jobgate/storage/{dialect}/migrations/{p.name}" for p in shipped} == migrations
    shared_sql = sorted((doc_blocks.ROOT / "src/jobgate/storage/sql_shared").glob("*.sql"))
    assert shared_sql  # the statements both dialects load ship with them
    assert {f"jobgate/storage/sql_shared/{p.name}" for p in shared_sql} <= names
    assert "jobgate/http/templates/login.html" in names

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index",
        "--no-deps", wheel)  # fmt: skip
    site = Path(
        run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    )
    ours = [p for p in sys.path if p.endswith("site-packages")]
    (site / "test-dependencies.pth").write_text("\n".join(ours) + "\n")
    installed = run(python, "-c", "import jobgate, pathlib; print(pathlib.Path(jobgate.__file__))")
    assert installed.startswith(str(venv)), installed  # the wheel's copy, not the checkout's
    jobgate = venv / "bin" / "jobgate"
    assert "Server roles" in run(jobgate, "--help")

    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), JOBGATE_LOG_FORMAT="json")
    port = free_port()
    with (
        open(tmp_path / "serve.err", "w") as errors,
        subprocess.Popen(
            [jobgate, "serve", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        ) as server,
    ):
        try:
            assert server.stdout is not None
            banner = server.stdout.readline()
            assert banner.startswith("jobgate ") and f"http://127.0.0.1:{port}" in banner, banner
            client_env = {**env, "JOBGATE_URL": f"http://127.0.0.1:{port}"}
            answer = run(jobgate, "submit", "-q", "-m", "hello from the wheel", "--wait",
                         env=client_env)  # fmt: skip
            assert answer.strip() == "echo: hello from the wheel"
            docs = httpx.get(
                f"http://127.0.0.1:{port}/docs/assets/swagger-ui-bundle.js", timeout=10
            )
            assert docs.status_code == 200 and len(docs.content) > 100_000
        finally:
            server.terminate()
            server.wait(timeout=30)
