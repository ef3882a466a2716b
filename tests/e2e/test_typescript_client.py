"""The TypeScript client (clients/typescript): `npm ci && npm run build && npm test` pass (its
own tests start a real `jobgate serve`, cut a stream mid-way and verify the webhook vectors
shared with the Python client), and the page its README shows streams a job in Chromium with
a job token, from another origin (CORS), without an API key.

Skipped only where node is missing; JOBGATE_TEST_REQUIRE_NODE=1 (CI) makes that a failure.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from jobgate.client import Client
from tests.client.server import JobgateServer, clean_env
from tests.e2e.test_dashboard_browser import CHROMIUM, HAVE_CHROMIUM

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
PAGE_MARK = "<!-- page: stream-with-token"
NPM_TIMEOUT_S = 240


def npm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["npm", *args],
        cwd=PACKAGE,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT_S,
        check=False,
    )


def ran(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


@pytest.fixture(scope="module")
def built() -> Path:
    """The package installed from its lock file and built (dist/), once per run."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if os.environ.get("JOBGATE_TEST_REQUIRE_NODE") == "1":
            pytest.fail("node and npm are required (apt-get install nodejs npm)")
        pytest.skip("node is not installed (apt-get install nodejs npm)")
    installed = npm("ci", "--no-audit", "--no-fund", "--prefer-offline")
    assert installed.returncode == 0, ran(installed)
    build = npm("run", "build")
    assert build.returncode == 0, ran(build)
    return PACKAGE / "dist"


def test_the_typescript_clients_own_tests_pass(built: Path) -> None:
    # Its live tests start `jobgate serve`: this interpreter's, first on PATH.
    bin_dir = str(Path(sys.executable).parent)
    env = clean_env(PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    result = npm("test", env=env)
    assert result.returncode == 0, ran(result)
    assert re.search(r"\u2139 fail 0", result.stdout), ran(result)  # node's "i fail 0"


def readme_page() -> str:
    """The page clients/typescript/README.md shows, exactly as printed."""
    readme = (PACKAGE / "README.md").read_text()
    start = readme.index(PAGE_MARK)
    block = re.search(r"```html\n(.*?)```", readme[start:], re.S)
    assert block is not None, "the README's page block"
    return block.group(1)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def site(built: Path, tmp_path: Path) -> Iterator[str]:
    """The README's page and the built package beside it (./jobgate/), on a port of its own:
    another origin than jobgate's."""
    root = tmp_path / "site"
    root.mkdir()
    (root / "summary.html").write_text(readme_page())
    shutil.copytree(built, root / "jobgate")
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def gateway(site: str, tmp_path: Path) -> Iterator[JobgateServer]:
    """`jobgate serve` letting the page's origin call the job-token routes."""
    server = JobgateServer(tmp_path / "serve", env={"JOBGATE_CORS_ORIGINS": site})
    (tmp_path / "serve").mkdir()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    if not HAVE_CHROMIUM:
        if os.environ.get("JOBGATE_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail("Chromium is required (apt-get install chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
        )
        yield launched
        await launched.close()


async def test_the_readme_page_streams_a_job_with_a_job_token(
    site: str, gateway: JobgateServer, browser: Any
) -> None:
    body = {
        "model": "sim-echo",
        "messages": [{"role": "user", "content": "a summary for the browser"}],
        "sim": {"latency_s": 2, "chunks": 8},
    }
    with Client(gateway.url, gateway.api_key) as backend:
        job = backend.submit("/v1/chat/completions", body, stream=True)
        token = backend.create_job_token(job.id, ttl_s=300, scopes=["read", "stream"])
    page = await browser.new_page()
    sent: list[dict[str, str]] = []
    page.on("request", lambda request: sent.append(dict(request.headers)))
    fragment = f"server={quote(gateway.url, safe='')}&job={job.id}&token={token.token}"
    await page.goto(f"{site}/summary.html#{fragment}")
    status = page.locator("#status")
    await status.filter(has_text="succeeded").wait_for(timeout=60_000)
    shown = await page.locator("#output").text_content()
    with Client(gateway.url, gateway.api_key) as backend:
        finished = backend.get(job.id)
    assert finished.status == "succeeded"
    assert shown == finished.output_text and "a summary for the browser" in (shown or "")
    # The page held the job token, never the API key.
    to_jobgate = [h for h in sent if "authorization" in h]
    assert to_jobgate and all(h["authorization"] == f"Bearer {token.token}" for h in to_jobgate)
    assert gateway.api_key not in repr(sent)
