"""`jobgate jobs cancel|redrive|delete --where …` against a real server: the dry
run's count, the confirmation, chunked calls with progress, and usage errors."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner, Result

from jobgate.cli import cli
from jobgate.domain.states import JobState
from tests.api_server import Api

pytestmark = pytest.mark.asyncio


async def jobgate(api: Api, key: str, *args: str) -> Result:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("JOBGATE_")}
    env |= {"JOBGATE_URL": api.url, "JOBGATE_API_KEY": key}
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, cli, list(args), env=env, catch_exceptions=False)


async def submit(api: Api, key: str, batch: str, n: int) -> list[str]:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    request = {"endpoint": "/v1/chat/completions", "body": body, "metadata": {"batch": batch}}
    headers = {"Authorization": f"Bearer {key}"}
    return [
        (await api.http.post("/v1/jobs", json=request, headers=headers)).json()["id"]
        for _ in range(n)
    ]


async def test_cancel_by_metadata_counts_asks_then_acts_in_chunks(api: Api) -> None:
    key = await api.key("acme")
    seven = await submit(api, key, "7", 5)
    eight = await submit(api, key, "8", 2)

    dry = await jobgate(api, key, "jobs", "cancel", "--where", "metadata.batch=7", "--dry-run")
    assert dry.exit_code == 0 and dry.stdout.strip() == "5 jobs would be cancelled"
    unconfirmed = await jobgate(api, key, "jobs", "cancel", "--where", "metadata.batch=7")
    assert unconfirmed.exit_code == 2 and "pass --yes" in unconfirmed.stderr
    done = await jobgate(
        api, key, "jobs", "cancel", "--where", "metadata.batch=7", "--where", "status=queued",
        "--reason", "wrong batch", "--chunk", "2", "--yes",
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    assert done.stdout.strip() == "cancelled 5 jobs (5 matched when counted)"
    assert done.stderr.splitlines() == ["cancelled 2…", "cancelled 4…", "cancelled 5…"]
    for job_id, expected in [(j, JobState.CANCELLED) for j in seven] + [
        (j, JobState.QUEUED) for j in eight
    ]:
        job = await api.runtime.storage.job_get(job_id=job_id)
        assert job is not None and job.state is expected
    events = await api.runtime.storage.job_events(job_id=seven[0])
    assert events[-1].reason == "bulk_cancel: wrong batch"


async def test_a_tenant_filter_a_tenant_key_cannot_reach_says_so(api: Api) -> None:
    key = await api.key("default")
    await api.key("acme")
    refused = await jobgate(api, key, "jobs", "redrive", "--where", "tenant=acme", "--yes")
    assert refused.exit_code == 1
    [line] = refused.stderr.strip().splitlines()
    assert "'default'" in line and "tenant=acme" in line and "jobgate key --operator" in line


async def test_an_operator_deletes_across_tenants_with_json(api: Api) -> None:
    acme, beta = await api.key("acme"), await api.key("beta")
    await submit(api, acme, "1", 2)
    await submit(api, beta, "1", 1)
    operator = await api.runtime.operators.create("alice")
    result = await jobgate(api, operator, "jobs", "delete", "--all", "--yes", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "action": "delete", "dry_run": False, "matched": 3, "changed": 3,
    }  # fmt: skip
    nothing = await jobgate(api, operator, "jobs", "redrive", "--where", "tenant=acme", "--yes")
    assert nothing.stdout.strip() == "0 jobs would be redriven"


async def test_usage_errors(api: Api) -> None:
    key = await api.key("acme")
    for args, message in [
        ((), "say which jobs to cancel"),
        (("--where", "colour=red"), "unknown --where key 'colour'"),
        (("--where", "nonsense"), "--where wants KEY=VALUE"),
        (("--where", "created_after=yesterday"), "created_after wants unix seconds"),
        (("--where", "dead_lettered=maybe"), "dead_lettered is true or false"),
    ]:
        result = await jobgate(api, key, "jobs", "cancel", *args)
        assert result.exit_code == 2 and message in result.stderr, (args, result.stderr)
    refused = await jobgate(api, key, "jobs", "cancel", "--where", "status=sleeping", "--yes")
    assert refused.exit_code == 1 and "400" in refused.stderr
    listed = await jobgate(api, key, "jobs", "--json")
    assert listed.exit_code == 0 and json.loads(listed.stdout)["object"] == "list"


def answer_on_pty(args: list[str], env: dict[str, str], answer: bytes) -> tuple[int, str]:
    """Run `jobgate ARGS` on a terminal and answer its question with `answer`."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "jobgate", *args],
        stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    output, answered = b"", False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the other side closed: the command ended
                break
            if not chunk:
                break
            output += chunk
            if not answered and b"[y/N]" in output:
                os.write(master, answer)
                answered = True
        elif process.poll() is not None:
            break
    os.close(master)
    return process.wait(10), output.decode(errors="replace")


async def test_the_question_on_a_terminal(api: Api) -> None:
    key = await api.key("acme")
    jobs = await submit(api, key, "9", 2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    env |= {"JOBGATE_URL": api.url, "JOBGATE_API_KEY": key, "NO_COLOR": "1"}
    args = ["jobs", "cancel", "--where", "metadata.batch=9"]

    code, screen = await asyncio.to_thread(answer_on_pty, args, env, b"n\n")
    assert code == 1 and "cancel 2 jobs? [y/N]" in screen and "nothing changed" in screen
    assert {(await api.runtime.storage.job_get(job_id=j)).state for j in jobs} == {  # type: ignore[union-attr]
        JobState.QUEUED
    }
    code, screen = await asyncio.to_thread(answer_on_pty, args, env, b"y\n")
    assert code == 0 and "cancelled 2 jobs" in screen, screen


async def test_where_pairs_become_the_api_filter() -> None:
    from jobgate.cli.bulk import parse_where

    where = parse_where(
        (
            "status=queued,failed", "status=running", "metadata.batch=7", "metadata.k=a=b",
            "dead_lettered=TRUE", "created_before=2026-12-01T00:00:00Z", "created_after=2h",
            "tenant=acme", "error_code=server_error",
        ),
        as_json=False,
    )  # fmt: skip
    now = time.time()
    assert abs(where.pop("created_after") - (now - 7200)) < 60
    assert where == {
        "status": ["queued", "failed", "running"],
        "metadata": {"batch": "7", "k": "a=b"},
        "dead_lettered": True,
        "created_before": 1796083200,
        "tenant": "acme",
        "error_code": "server_error",
    }
    assert parse_where(("created_after=1764547200",), as_json=False) == {
        "created_after": 1764547200
    }
