"""`jobgate jobs --meta K=V --model M --provider P --since WHEN --until WHEN` against a real
server: the search's jobs, the next page's command with the same options, usage errors."""

from __future__ import annotations

import asyncio
import json
import os
import shlex

import pytest
from click.testing import CliRunner, Result

from jobgate.cli import cli
from tests.api_server import Api

pytestmark = pytest.mark.asyncio


async def jobgate(api: Api, key: str, *args: str) -> Result:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("JOBGATE_")}
    env |= {"JOBGATE_URL": api.url, "JOBGATE_API_KEY": key, "NO_COLOR": "1"}
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, cli, list(args), env=env, catch_exceptions=False)


async def submit(api: Api, key: str, metadata: dict[str, str], model: str = "sim-echo") -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    request = {"endpoint": "/v1/chat/completions", "body": body, "metadata": metadata}
    headers = {"Authorization": f"Bearer {key}"}
    job_id: str = (await api.http.post("/v1/jobs", json=request, headers=headers)).json()["id"]
    return job_id


def listed(result: Result) -> list[str]:
    assert result.exit_code == 0, result.stderr
    return [job["id"] for job in json.loads(result.stdout)["data"]]


async def test_jobs_searches_by_each_option(api: Api) -> None:
    key = await api.key("acme")
    alice = await submit(api, key, {"user": "alice", "kind": "a"})
    bob = await submit(api, key, {"user": "bob"}, model="sim-other")
    assert listed(await jobgate(api, key, "jobs", "--json", "--meta", "user=alice")) == [alice]
    both = ("--meta", "user=alice", "--meta", "kind=b")
    assert listed(await jobgate(api, key, "jobs", "--json", *both)) == []
    assert listed(await jobgate(api, key, "jobs", "--json", "--model", "sim-other")) == [bob]
    by_provider = await jobgate(api, key, "jobs", "--json", "--provider", "sim")
    assert listed(by_provider) == [bob, alice]
    assert listed(await jobgate(api, key, "jobs", "--json", "--since", "1h")) == [bob, alice]
    assert listed(await jobgate(api, key, "jobs", "--json", "--until", "1h")) == []
    window = ("--since", "2020-01-01T00:00:00Z", "--until", "4102444800")
    assert listed(await jobgate(api, key, "jobs", "--json", *window, "--status", "queued")) == [
        bob,
        alice,
    ]
    table = await jobgate(api, key, "jobs", "--meta", "user=bob")
    assert table.exit_code == 0 and bob in table.stdout and alice not in table.stdout


async def test_the_next_page_command_keeps_the_search(api: Api) -> None:
    key = await api.key("acme")
    tagged = [await submit(api, key, {"run": "r 1"}) for _ in range(3)]
    await submit(api, key, {"run": "other"})
    first = await jobgate(api, key, "jobs", "--meta", "run=r 1", "--since", "1h", "--limit", "2")
    assert first.exit_code == 0, first.stderr
    hint = first.stderr.strip()
    assert hint.startswith("more: jobgate jobs --meta 'run=r 1' --since ") and "(or --all)" in hint
    command = shlex.split(hint.removeprefix("more: ").removesuffix("(or --all)"))
    assert command[command.index("--since") + 1].isdigit()  # the age as the moment it was
    rest = await jobgate(api, key, *command[1:], "--json")
    assert listed(rest) == tagged[:1]


async def test_a_partial_page_still_tells_the_next_command(api: Api) -> None:
    """A search page that read its bound of jobs without a match shows none, and still the
    command for the next page, from the last job it read; --all pages through to the end."""
    api.runtime.jobs.search_walk_rows = 2
    key = await api.key("acme")
    wanted = await submit(api, key, {}, model="sim-rare")
    for _ in range(3):
        await submit(api, key, {})
    empty = await jobgate(api, key, "jobs", "--model", "sim-rare", "--since", "1h")
    assert empty.exit_code == 0, empty.stderr
    assert empty.stdout.strip() == "no jobs in this page"
    hint = "more: jobgate jobs --model sim-rare --since "
    assert empty.stderr.startswith(hint) and " --after job_" in empty.stderr, empty.stderr
    every = await jobgate(api, key, "jobs", "--json", "--all", "--model", "sim-rare")
    assert listed(every) == [wanted]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--meta", "user"), "--meta wants KEY=VALUE"),
        (("--since", "yesterday"), "--since wants unix seconds"),
        (("--until", "2026-12-01T00:00:00"), "--until needs a time zone"),
    ],
)
async def test_a_malformed_option_is_a_usage_error(
    api: Api, args: tuple[str, ...], message: str
) -> None:
    key = await api.key("acme")
    result = await jobgate(api, key, "jobs", *args)
    assert result.exit_code == 2 and message in result.stderr, result.stderr


async def test_a_refused_search_is_one_line(api: Api) -> None:
    key = await api.key("acme")
    result = await jobgate(api, key, "jobs", "--meta", "k" * 65 + "=v")
    assert result.exit_code != 0 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "metadata key is at most 64" in result.stderr
