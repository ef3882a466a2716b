"""The client verbs against a real `jobgate serve` (its key found where `serve` saved it):
in-process for the many small cases, as real processes for exit codes, and on a pty for the
terminal mode of `jobgate wait`."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from jobgate.cli import cli
from jobgate.cli.client_output import CLEAR_LINE, SPINNER
from jobgate.client import Client
from tests.client.server import JOBGATE, JobgateServer

pytestmark = pytest.mark.e2e

HELLO = {"model": "sim-echo", "messages": [{"role": "user", "content": "hello"}]}


def invoke(served: JobgateServer, *args: str, input: str | None = None) -> Result:
    env = {"XDG_CONFIG_HOME": str(served.config_home), "JOBGATE_URL": served.url}
    env.update({k: None for k in os.environ if k.startswith("JOBGATE_") and k != "JOBGATE_URL"})  # type: ignore[misc]
    return CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)


def run(
    served: JobgateServer, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*JOBGATE, *args],
        env=served.env(JOBGATE_URL=served.url),
        cwd=served.workdir,
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )


# `jobgate` as an interactive shell starts it: Ctrl-C (SIGINT) at its default. A test run
# started in the background (`pytest &`, nohup, some CI runners) ignores SIGINT, every child
# inherits that, and a Python started with SIGINT ignored never turns it into
# KeyboardInterrupt: the Ctrl-C below would then be lost.
AS_FROM_A_SHELL = [
    sys.executable,
    "-c",
    "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from jobgate.cli import main; main()",
]


def run_on_pty(
    served: JobgateServer,
    *args: str,
    interrupt_when: Callable[[str], bool] | None = None,
    timeout_s: float = 40.0,
) -> tuple[int, str]:
    """Run `jobgate ARGS` with a terminal as its stdin, stdout and stderr; send it SIGINT
    (Ctrl-C) once its screen satisfies `interrupt_when`. A screen that never gets there fails
    the test with what it showed, within pytest's own timeout (60 s)."""
    env = served.env(JOBGATE_URL=served.url, TERM="xterm")
    env.pop("NO_COLOR", None)
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [*AS_FROM_A_SHELL, *args],
        env=env,
        cwd=served.workdir,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    output = b""
    interrupted = False
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            output += chunk
            if (
                interrupt_when
                and not interrupted
                and interrupt_when(output.decode(errors="replace"))
            ):
                process.send_signal(signal.SIGINT)
                interrupted = True
        else:
            raise AssertionError(
                f"`jobgate {' '.join(args)}` still running after {timeout_s:g} s; its screen:\n"
                + output.decode(errors="replace")
            )
        return process.wait(timeout=15), output.decode()
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
            process.wait()  # reaped here, not reported as a leak in a later test


def submit_id(served: JobgateServer, body: dict[str, Any], *extra: str) -> str:
    result = invoke(served, "submit", "-q", "-", *extra, input=json.dumps(body))
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


# -- terminal and plain modes of `wait` (real processes) ----------------------------------


def test_wait_on_a_terminal_shows_a_live_status_line_and_the_transitions(
    served: JobgateServer,
) -> None:
    job_id = submit_id(served, {**HELLO, "sim": {"latency_s": 2}})
    code, screen = run_on_pty(served, "wait", job_id)
    assert code == 0, screen
    assert CLEAR_LINE in screen  # the live line is redrawn in place
    # spinner, job, status, elapsed time
    assert re.search(rf"[{SPINNER}] {job_id}  \S*(queued|running)\S*  \d+\.\ds", screen)
    assert "running → " in screen and "succeeded" in screen
    assert "\x1b[" in screen.split("running → ")[1]  # statuses in colour on a terminal
    assert f"✔ {job_id} succeeded after" in screen
    assert screen.rstrip().endswith("echo: hello")


def test_wait_on_a_terminal_shows_a_long_job_running_and_ends_cleanly_on_ctrl_c(
    served: JobgateServer,
) -> None:
    job_id = submit_id(served, {**HELLO, "sim": {"fail_with": "hang"}})
    live_running = re.compile(rf"[{SPINNER}] {job_id}  \S*running\S*  \d+\.\ds")
    try:
        code, screen = run_on_pty(
            served, "wait", job_id, interrupt_when=lambda s: bool(live_running.search(s))
        )
    finally:
        invoke(served, "cancel", job_id)
    assert code == 130, screen
    assert "queued → " in screen  # the transition, shown while the long poll is held
    assert screen.endswith(CLEAR_LINE + "\r\n")  # the live line was cleared and ended


def test_wait_without_a_terminal_prints_plain_lines(served: JobgateServer) -> None:
    job_id = submit_id(served, {**HELLO, "sim": {"latency_s": 1}})
    result = run(served, "wait", job_id)
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\r" not in result.stdout
    lines = result.stdout.splitlines()
    assert lines[-1] == "echo: hello"
    transitions = lines[:-1]
    assert all(line.startswith(f"{job_id} ") for line in transitions)
    assert transitions[-1].split("  ")[1] == "running → succeeded"
    assert "· → queued" in result.stdout


def test_submit_wait_on_a_terminal_reports_a_failed_job_with_its_exit_code(
    served: JobgateServer,
) -> None:
    body = {**HELLO, "sim": {"fail_with": "server_error"}}
    path = served.workdir / "poison.json"
    path.write_text(json.dumps(body))
    code, screen = run_on_pty(served, "submit", str(path), "--wait", "--max-attempts", "1")
    assert code == 3, screen
    assert "✘ job_" in screen and " failed after " in screen
    last = screen.rstrip().splitlines()[-1]
    assert last.startswith("jobgate: job job_") and last.endswith(
        "failed: server_error: simulated server error"
    )


@pytest.mark.timeout(180)
def test_exit_codes_of_real_processes(served: JobgateServer) -> None:
    hung = submit_id(served, {**HELLO, "sim": {"fail_with": "hang"}})
    timed_out = run(served, "wait", hung, "--timeout", "1")
    assert timed_out.returncode == 6
    assert timed_out.stderr.count("\n") == 1 and "still " in timed_out.stderr
    assert run(served, "cancel", hung).returncode == 0
    cancelled = run(served, "wait", hung, "--json")
    assert cancelled.returncode == 4
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    missing = run(served, "status", "job_missing")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == "jobgate: no job with id 'job_missing' (404 not_found)\n"


# -- every verb, in-process ---------------------------------------------------------------


def test_submit_status_and_events(served: JobgateServer) -> None:
    result = invoke(served, "submit", "-m", "hi there", "--metadata", "order=42", "--wait")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "echo: hi there"
    job_id = result.stdout.split()[0]

    status = invoke(served, "status", job_id)
    assert status.exit_code == 0
    assert status.stdout.startswith(f"{job_id}  succeeded\n")
    assert "output     echo: hi there" in status.stdout
    assert '{"order": "42"}' in status.stdout

    events = invoke(served, "events", job_id)
    assert [line.strip().split("  ")[2] for line in events.stdout.splitlines()] == [
        "· → queued",
        "queued → running",
        "running → succeeded",
    ]
    follow = invoke(served, "events", job_id, "--follow", "--json", "--after", "1")
    assert [json.loads(line)["seq"] for line in follow.stdout.splitlines()] == [2, 3]


def test_submit_reads_a_whole_request_or_a_body_from_a_file_or_stdin(
    served: JobgateServer, tmp_path: Path
) -> None:
    request = {"endpoint": "/v1/chat/completions", "body": HELLO, "metadata": {"a": "b"}}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    result = invoke(served, "submit", str(path), "--json", "--priority", "1")
    job = json.loads(result.stdout)
    assert job["metadata"] == {"a": "b"} and job["priority"] == 1
    piped = invoke(served, "submit", input=json.dumps(HELLO))
    assert piped.exit_code == 0 and piped.stdout.startswith("job_")
    assert "follow it: jobgate wait job_" in piped.stderr
    again = invoke(served, "submit", "-q", "--idempotency-key", "cli-1", input=json.dumps(HELLO))
    same = invoke(served, "submit", "-q", "--idempotency-key", "cli-1", input=json.dumps(HELLO))
    assert again.stdout == same.stdout


def test_jobs_table_filter_paging_and_json(served: JobgateServer) -> None:
    hung = submit_id(served, {**HELLO, "sim": {"fail_with": "hang"}})
    for _ in range(2):  # pages of one need more than one job, whatever ran before
        submit_id(served, HELLO)
    table = invoke(served, "jobs", "--status", "running", "--status", "queued")
    assert table.exit_code == 0
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["ID", "STATUS", "MODEL", "ATTEMPT", "CREATED"]
    assert hung in {row.split()[0] for row in rows}
    assert {row.split()[1] for row in rows} <= {"running", "queued"}
    listed = json.loads(invoke(served, "jobs", "--json", "--limit", "1").stdout)
    assert listed["object"] == "list" and len(listed["data"]) == 1 and listed["has_more"]
    paged = invoke(served, "jobs", "--limit", "1")
    assert f"more: jobgate jobs --after {listed['last_id']}" in paged.stderr
    assert len(invoke(served, "jobs", "--all").stdout.splitlines()) > 2
    cancelled = invoke(served, "cancel", hung)
    assert cancelled.exit_code == 0 and hung in cancelled.stdout
    again = invoke(served, "cancel", hung)
    assert again.stdout.strip() == f"{hung} already cancelled; nothing to cancel"


def test_dlq_list_and_redrive(served: JobgateServer) -> None:
    body = {**HELLO, "sim": {"fail_with": "server_error"}}
    failed = invoke(
        served, "submit", "--max-attempts", "1", "--wait", "--json", input=json.dumps(body)
    )
    assert failed.exit_code == 3
    job_id = json.loads(failed.stdout)["id"]
    listing = invoke(served, "dlq", "list")
    row = next(line for line in listing.stdout.splitlines() if line.startswith(job_id))
    assert "failed" in row and "server_error: simulated server error" in row
    redriven = invoke(served, "dlq", "redrive", job_id)
    assert redriven.stdout.strip() == f"{job_id} redriven: queued"
    # (the redriven job may already have failed again: refuse a job that never failed)
    healthy = submit_id(served, HELLO)
    refused = invoke(served, "dlq", "redrive", healthy)
    assert refused.exit_code == 1 and "(409 job_not_dead_lettered)" in refused.stderr


def test_errors_are_one_line_with_documented_exit_codes(served: JobgateServer) -> None:
    wrong_key = invoke(served, "status", "job_x", "--api-key", "jg_wrong")
    assert wrong_key.exit_code == 2
    assert wrong_key.stderr.strip().count("\n") == 0 and "401 invalid_api_key" in wrong_key.stderr
    as_json = invoke(served, "status", "job_x", "--api-key", "jg_wrong", "--json")
    assert json.loads(as_json.stderr)["error"]["code"] == "invalid_api_key"
    unreachable = invoke(served, "jobs", "--url", "http://127.0.0.1:9", "--api-key", "k")
    assert unreachable.exit_code == 1
    assert unreachable.stderr.startswith("jobgate: cannot reach http://127.0.0.1:9")
    assert "is `jobgate serve` running?" in unreachable.stderr
    no_key = invoke(served, "jobs", "--url", "http://127.0.0.1:9")
    assert no_key.exit_code == 2 and "no API key for http://127.0.0.1:9" in no_key.stderr
    bad_body = invoke(served, "submit", input="{not json")
    assert bad_body.exit_code == 2 and "not valid JSON" in bad_body.stderr
    invalid = invoke(served, "submit", input=json.dumps({"model": "nope-model", "messages": []}))
    assert invalid.exit_code == 1 and invalid.stderr.startswith("jobgate: ")
    assert invalid.stderr.count("\n") == 1


def test_dlq_redrive_of_a_purged_job_is_refused_in_one_line(served: JobgateServer) -> None:
    body = {**HELLO, "sim": {"fail_with": "server_error"}}
    failed = invoke(
        served, "submit", "--max-attempts", "1", "--wait", "--json", input=json.dumps(body)
    )
    job_id = json.loads(failed.stdout)["id"]
    with Client(served.url, served.api_key) as client:
        client.delete(job_id)  # input and result erased: nothing left to send
    refused = invoke(served, "dlq", "redrive", job_id)
    assert refused.exit_code == 1 and refused.stderr.count("\n") == 1
    assert "(409 job_purged)" in refused.stderr and "submit it again" in refused.stderr
