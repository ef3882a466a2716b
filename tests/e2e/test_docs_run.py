"""Every shell and Python block of README.md and docs/*.md runs, as written, against one real
`jobgate serve`, offline (the convention is docs/writing-docs.md). A block fails on a non-zero
exit, a traceback, a problem+json answer, or output without what its `expect` says."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobgate.testing.processes import ProcessHarness, free_port
from tests.e2e import doc_blocks

pytestmark = [pytest.mark.e2e]
BLOCK_TIMEOUT_S = 90
# As the README's webhook section starts the server.
SERVE_ENV = {"JOBGATE_WEBHOOK_ALLOW_HTTP": "1", "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.1/32"}
# Stop a block's background jobs (`jobgate simulator … &`) when it ends, however it ends.
SHELL_PROLOGUE = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n"
UNEXPECTED = (
    (re.compile(r"Traceback \(most recent call last\)"), "a traceback"),
    (re.compile(r'"type":\s*"/problems/'), "a problem+json answer"),
)


class DocsServer:
    """One `jobgate serve` for every document, and the environment blocks run in."""

    def __init__(self, harness: ProcessHarness, database_url: str) -> None:
        serve = harness.start("serve", env={**SERVE_ENV, "JOBGATE_DATABASE_URL": database_url})
        assert serve.url is not None
        self.url = serve.url
        self.address = serve.url.removeprefix("http://")
        bin_dir = str(Path(sys.executable).parent)
        self.env = {
            **{k: v for k, v in harness.env.items() if not k.startswith("JOBGATE_")},
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "JOBGATE_URL": self.url,
            "JOBGATE_API_KEY": harness.default_api_key(self.url),
            "JOBGATE_DATABASE_URL": database_url,
            "NO_COLOR": "1",
        }
        self.ports = {"9100": str(free_port()), "9200": str(free_port())}
        self._simulator: subprocess.Popen[bytes] | None = None

    def simulator(self) -> None:
        """`jobgate simulator --port 9100` (its port localised), for blocks that ask for it;
        started once, on first use."""
        if self._simulator is not None:
            return
        port = int(self.ports["9100"])
        self._simulator = subprocess.Popen(
            [sys.executable, "-m", "jobgate", "simulator", "--port", str(port)],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self._simulator.poll() is None, "jobgate simulator exited"
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        pytest.fail("jobgate simulator did not listen within 60 s")

    def close(self) -> None:
        if self._simulator is not None:
            self._simulator.terminate()
            self._simulator.wait(timeout=30)

    def localise(self, code: str) -> str:
        """The documented addresses replaced by this test's (docs/writing-docs.md)."""
        code = re.sub(r"\b(localhost|127\.0\.0\.1):8000\b", self.address, code)
        for documented, actual in self.ports.items():
            code = re.sub(rf"\b{documented}\b", actual, code)
        return code


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocsServer]:
    directory = tmp_path_factory.mktemp("docs-serve")
    with ProcessHarness(directory, fast=True) as harness:
        server = DocsServer(harness, f"sqlite:///{directory / 'jobgate.db'}")
        try:
            yield server
        finally:
            server.close()


def run_block(block: doc_blocks.Block, code: str, server: DocsServer, cwd: Path) -> str:
    if "simulator" in block.options:
        server.simulator()
    code = server.localise(code)
    if block.language in doc_blocks.SHELLS:
        command = ["bash", "-e", "-o", "pipefail", "-c", SHELL_PROLOGUE + code]
    else:
        command = [sys.executable, "-c", code]
    try:
        result = subprocess.run(
            command,
            cwd=cwd,
            env=server.env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT_S} s: {exc.stdout!r}")
    shown = (
        f"{block.where} ({block.language}):\n{code}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )
    assert result.returncode == 0, f"exit {result.returncode} from {shown}"
    for pattern, what in UNEXPECTED:
        assert not pattern.search(result.stdout + result.stderr), f"{what} from {shown}"
    for expected in block.expects:
        assert expected in result.stdout, f"no {expected!r} in the output of {shown}"
    return result.stdout


DOCUMENTS = [str(p.relative_to(doc_blocks.ROOT)) for p in doc_blocks.documents()]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_blocks_of_a_document_run(
    document: str, docs_server: DocsServer, tmp_path: Path
) -> None:
    blocks = doc_blocks.parse(doc_blocks.ROOT / document)
    for block, code in doc_blocks.runnable(blocks):
        run_block(block, code, docs_server, tmp_path)


def test_every_block_is_run_or_says_why_not() -> None:
    """A directive that does not parse fails here rather than being ignored, and the README's
    install, curl, client, CLI, webhook and SDK examples are among those that run."""
    readme = doc_blocks.parse(doc_blocks.ROOT / "README.md")
    running = [block for block in readme if block.runs]
    assert len(running) >= 5
    assert any("curl" in b.code and "$JOB" in b.code and "JOB=" in b.code for b in running)
    assert any("jobgate listen" in b.code for b in running)
    assert any("openai.OpenAI(" in b.code for b in running)
    for path in doc_blocks.documents():
        for block in doc_blocks.parse(path):
            if block.language in doc_blocks.RUNNABLE and not block.runs:
                assert block.not_run, block.where


def test_directives_parse_and_mistakes_in_them_fail() -> None:
    text = (
        "<!-- not-run: needs a real key -->\n```sh\ncurl https://api.openai.com\n```\n"
        "```python\nx = 1\n```\n"
        "<!-- expect: 2 -->\n<!-- run: continues -->\n```python\nprint(x + 1)\n```\n"
        "```toml\n[a]\n```\n"
    )
    blocks = doc_blocks.parse_text(text, "t.md")
    assert [b.language for b in blocks] == ["sh", "python", "python", "toml"]
    assert blocks[0].not_run == "needs a real key" and not blocks[0].runs
    assert blocks[2].expects == ("2",) and blocks[2].options == {"continues"}
    chosen = doc_blocks.runnable(blocks)
    assert [(b.line, code) for b, code in chosen] == [
        (5, "x = 1\n"),
        (10, "x = 1\n\nprint(x + 1)\n"),
    ]
    for broken in (
        "<!-- not-run: -->\n```sh\ntrue\n```\n",
        "<!-- not-run needs a reason -->\n```sh\ntrue\n```\n",
        "<!-- run: sometimes -->\n```sh\ntrue\n```\n",
    ):
        with pytest.raises(ValueError, match=r"t\.md:2"):
            doc_blocks.parse_text(broken, "t.md")


@pytest.mark.timeout(120)
def test_a_block_can_ask_for_the_simulator(docs_server: DocsServer, tmp_path: Path) -> None:
    code = (
        "import openai\n"
        'client = openai.OpenAI(base_url="http://127.0.0.1:9100/v1", api_key="x")\n'
        'answer = client.chat.completions.create(model="m", messages=[{"role": "user", '
        '"content": "hi"}])\n'
        "print(answer.choices[0].message.content)\n"
    )
    block = doc_blocks.Block(
        "t.md", 1, "python", code, expects=("hi",), options=frozenset({"simulator"})
    )
    run_block(block, code, docs_server, tmp_path)
