"""Every shell and Python block of README.md and docs/*.md runs as a reader types it (the
convention is docs/writing-docs.md): in a clean environment (a fresh HOME, a new directory, no
JOBGATE_* variable), in the order a reader meets them, against the one `jobgate serve` the
README starts on its documented port, offline. A block fails on a non-zero exit, a traceback, a
problem+json answer, output without what its `expect` says, or a background process it left
running."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import doc_blocks
from tests.e2e.reader import Reader

pytestmark = [pytest.mark.e2e]
BLOCK_TIMEOUT_S = 90
# The README's way to start the server for its webhook example, in the reader's first terminal.
SERVE_ENV = {"JOBGATE_WEBHOOK_ALLOW_HTTP": "1", "JOBGATE_WEBHOOK_ALLOW_CIDRS": "127.0.0.1/32"}
# A missing tool fails its block where the suite requires it (CI), else the block is skipped.
REQUIRED_TOOLS = {"promtool": "JOBGATE_TEST_REQUIRE_PROMTOOL"}
UNEXPECTED = (
    (re.compile(r"Traceback \(most recent call last\)"), "a traceback"),
    (re.compile(r'"type":\s*"/problems/'), "a problem+json answer"),
)
# After the reading, what the server still holds of it: the webhook endpoints a tenant
# registered (the README's example deletes its own).
LEFT_BEHIND = r"""
import json, urllib.request
from jobgate.client import credentials
request = urllib.request.Request(
    "http://127.0.0.1:8000/v1/webhook_endpoints",
    headers={"Authorization": "Bearer " + credentials.saved_key("http://127.0.0.1:8000")},
)
print(json.dumps([e["url"] for e in json.load(urllib.request.urlopen(request))["data"]]))
"""


class Reading:
    """One reader, their server in a first terminal, and a second terminal for the blocks."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.first_terminal = reader.directory_for("first-terminal")
        self.terminal = reader.directory_for("terminal")
        reader.start("serve", ["jobgate", "serve"], cwd=self.first_terminal, env=SERVE_ENV)
        reader.wait_listening(8000, name="serve")

    def run(self, block: doc_blocks.Block, code: str) -> str | None:
        """Run one block; what went wrong, or None."""
        if block.language in doc_blocks.SHELLS:
            argv = ["bash", "-e", "-o", "pipefail", "-c", code]
        else:
            argv = ["python3", "-c", code]
        try:
            result, left = self.reader.run(argv, cwd=self.terminal, timeout_s=BLOCK_TIMEOUT_S)
        except AssertionError as exc:
            return f"{block.where}: {exc}"
        shown = (
            f"{block.where} ({block.language}):\n{code}\n"
            f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        )
        if result.returncode != 0:
            return f"exit {result.returncode} from {shown}"
        for pattern, what in UNEXPECTED:
            if pattern.search(result.stdout + result.stderr):
                return f"{what} from {shown}"
        for expected in block.expects:
            if expected not in result.stdout:
                return f"no {expected!r} in the output of {shown}"
        if left:
            return f"a background process still running after {shown}"
        return None

    def left_behind(self) -> list[str]:
        result, _ = self.reader.run(["python3", "-c", LEFT_BEHIND], cwd=self.terminal, timeout_s=30)
        assert result.returncode == 0, result.stderr
        return list(json.loads(result.stdout))


@pytest.fixture(scope="module")
def reading(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reading]:
    with Reader(tmp_path_factory.mktemp("reader")) as reader:
        yield Reading(reader)


def missing_tool(block: doc_blocks.Block) -> str | None:
    """The first command the block needs that this machine lacks, if any (a failure where the
    suite requires that tool)."""
    for tool in block.needs:
        if shutil.which(tool) is None:
            variable = REQUIRED_TOOLS.get(tool)
            if variable and os.environ.get(variable) == "1":
                pytest.fail(f"{block.where} needs {tool}, which is not installed, and {variable}=1")
            return tool
    return None


@pytest.mark.timeout(600)
def test_the_docs_run_as_a_reader_types_them(reading: Reading) -> None:
    failures: list[str] = []
    skipped: list[str] = []
    timings: list[tuple[float, str]] = []
    for document in doc_blocks.reading_order():
        for block, code in doc_blocks.runnable(doc_blocks.parse(document)):
            if "postgres" in block.options:
                continue  # a process recipe: tests/e2e/test_docs_recipes.py
            tool = missing_tool(block)
            if tool is not None:
                skipped.append(f"{block.where} (no {tool})")
                continue
            started = time.monotonic()
            failure = reading.run(block, code)
            timings.append((time.monotonic() - started, block.where))
            if failure is not None:
                failures.append(failure)
    left = reading.left_behind()
    if left:
        failures.append(f"webhook endpoints the docs registered are still there: {left}")
    slowest = ", ".join(f"{where} {took:.1f} s" for took, where in sorted(timings)[-5:])
    print(f"{len(timings)} blocks in {sum(t for t, _ in timings):.1f} s; slowest: {slowest}")
    assert not failures, "\n\n".join(failures) + "\n--- serve\n" + reading.reader.log("serve")
    if skipped:
        print(f"skipped for a missing tool: {', '.join(skipped)}")


def test_a_block_that_leaves_a_process_running_fails(reading: Reading) -> None:
    block = doc_blocks.Block("t.md", 1, "sh", "sleep 60 &\necho started\n")
    failure = reading.run(block, block.code)
    assert failure is not None and "background process still running" in failure
    stopped = doc_blocks.Block("t.md", 1, "sh", "sleep 60 &\nkill %1\n")
    assert reading.run(stopped, stopped.code) is None


def test_blocks_see_no_jobgate_variable_and_a_fresh_home(reading: Reading) -> None:
    code = "import json, os, sys; print(json.dumps([dict(os.environ), sys.executable]))"
    result, _ = reading.reader.run(["python3", "-c", code], cwd=reading.terminal, timeout_s=30)
    assert result.returncode == 0, result.stderr
    env, python = json.loads(result.stdout)
    assert [name for name in env if name.startswith("JOBGATE_")] == []
    assert env["HOME"] == str(reading.reader.home) != os.environ.get("HOME")
    assert Path(python).parent == Path(sys.executable).parent


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
            assert 'JOBGATE_URL"]' not in block.code, f"{block.where} reads a variable it never set"


def test_the_reading_order_is_the_readmes() -> None:
    order = [str(p.relative_to(doc_blocks.ROOT)) for p in doc_blocks.reading_order()]
    assert order[0] == "README.md"
    assert sorted(order) == sorted(
        str(p.relative_to(doc_blocks.ROOT)) for p in doc_blocks.documents()
    )
    readme = (doc_blocks.ROOT / "README.md").read_text()
    linked = [name for name in order[1:] if f"({name}" in readme]
    assert linked == sorted(linked, key=lambda name: readme.index(f"({name}"))


def test_directives_parse_and_mistakes_in_them_fail() -> None:
    text = (
        "<!-- not-run: needs a real key -->\n```sh\ncurl https://api.openai.com\n```\n"
        "```python\nx = 1\n```\n"
        "<!-- not-run: a fragment -->\n```python\nx = undefined\n```\n"
        "<!-- expect: 2 -->\n<!-- run: continues -->\n```python\nprint(x + 1)\n```\n"
        "```toml\n[a]\n```\n"
        "<!-- needs: promtool -->\n<!-- run: postgres -->\n```sh\npromtool --version\n```\n"
    )
    blocks = doc_blocks.parse_text(text, "t.md")
    assert [b.language for b in blocks] == ["sh", "python", "python", "python", "toml", "sh"]
    assert blocks[0].not_run == "needs a real key" and not blocks[0].runs
    assert blocks[3].expects == ("2",) and blocks[3].options == {"continues"}
    assert blocks[5].needs == ("promtool",) and blocks[5].options == {"postgres"}
    chosen = doc_blocks.runnable(blocks)
    assert [(b.line, code) for b, code in chosen][:2] == [
        (5, "x = 1\n"),
        (14, "x = 1\n\nprint(x + 1)\n"),  # a block that does not run is no predecessor
    ]
    for broken in (
        "<!-- not-run: -->\n```sh\ntrue\n```\n",
        "<!-- not-run needs a reason -->\n```sh\ntrue\n```\n",
        "<!-- run: sometimes -->\n```sh\ntrue\n```\n",
        "<!-- run: simulator -->\n```sh\ntrue\n```\n",
        "<!-- needs: -->\n```sh\ntrue\n```\n",
    ):
        with pytest.raises(ValueError, match=r"t\.md:2"):
            doc_blocks.parse_text(broken, "t.md")


def test_the_reader_has_its_own_network_where_the_kernel_allows_one(reading: Reading) -> None:
    """With a namespace, 127.0.0.1 inside is not the machine's: a port listening here is not
    reachable there, and the reader's server on 8000 is in nobody's way."""
    if not reading.reader.isolated:
        pytest.skip("no user and network namespaces here: the documented ports are the machine's")
    with socket.socket() as here:
        here.bind(("127.0.0.1", 0))
        here.listen()
        port = here.getsockname()[1]
        code = f"import socket; print(socket.socket().connect_ex(('127.0.0.1', {port})))"
        inside, _ = reading.reader.run(["python3", "-c", code], cwd=reading.terminal, timeout_s=30)
    assert inside.stdout.strip() != "0"
    served, _ = reading.reader.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "localhost:8000/healthz"],
        cwd=reading.terminal,
        timeout_s=30,
    )
    assert served.stdout == "200"
