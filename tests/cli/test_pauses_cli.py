"""`jobgate pause`, `resume` and `pauses` against a real server, on both backends: an operator
pauses and resumes claims (by --api-key or the operator key `jobgate serve` saved), held jobs
say so, and refusals are one line: a tenant key, no key, an unknown provider, an unknown
pause, a resume that names nothing."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from click.testing import CliRunner, Result

from jobgate.cli import cli
from jobgate.client import credentials
from tests.api_server import Api


async def jobgate(api: Api, key: str | None, *args: str, **env: str) -> Result:
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("JOBGATE_")}
    clean |= {"JOBGATE_URL": api.url, "JOBGATE_API_KEY": key, **env}
    runner = CliRunner()
    return await asyncio.to_thread(
        runner.invoke, cli, list(args), env=clean, catch_exceptions=False
    )


async def submit(api: Api, key: str) -> str:
    body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}
    answer = await api.http.post(
        "/v1/jobs",
        json={"endpoint": "/v1/chat/completions", "body": body},
        headers={"Authorization": f"Bearer {key}"},
    )
    job_id: str = answer.json()["id"]
    return job_id


async def test_an_operator_pauses_lists_and_resumes(api: Api) -> None:
    operator = await api.runtime.operators.create("alice")
    tenant_key = await api.key("acme")
    job_id = await submit(api, tenant_key)
    paused = await jobgate(
        api, operator, "pause", "--provider", "sim", "--tenant", "acme", "--reason", "deploy"
    )
    assert paused.exit_code == 0, paused.stderr
    (pause,) = await api.runtime.storage.pause_list()
    assert paused.stdout.strip() == (
        f"paused {pause.id}  provider sim, model any, tenant acme: deploy"
    )
    why = await jobgate(api, tenant_key, "why", job_id)
    assert "paused by an operator" in why.stdout and pause.id in why.stdout

    listed = await jobgate(api, operator, "pauses")
    assert listed.stdout.startswith(f"{pause.id}  provider sim") and "by alice" in listed.stdout
    as_json = json.loads((await jobgate(api, operator, "pauses", "--json")).stdout)
    assert [p["id"] for p in as_json["data"]] == [pause.id]

    resumed = await jobgate(api, operator, "resume", pause.id)
    assert resumed.exit_code == 0 and resumed.stdout.startswith(f"resumed {pause.id}")
    assert (await jobgate(api, operator, "pauses")).stdout.strip() == "nothing is paused"


async def test_resume_all_and_a_pause_of_everything(api: Api) -> None:
    operator = await api.runtime.operators.create("alice")
    everything = await jobgate(api, operator, "pause")
    assert "every claim" in everything.stdout
    await jobgate(api, operator, "pause", "--model", "sim-echo")
    resumed = await jobgate(api, operator, "resume", "--all")
    assert resumed.exit_code == 0 and resumed.stdout.count("resumed pause_") == 2
    assert await api.runtime.storage.pause_list() == []
    again = await jobgate(api, operator, "resume", "--all")
    assert again.stdout.strip() == "nothing was paused"


async def test_the_operator_key_serve_saved(api: Api, tmp_path: Path) -> None:
    operator = await api.runtime.operators.create("alice")
    saved = tmp_path / "credentials.json"
    credentials.save(saved, api.url, operator_key=operator)
    result = await jobgate(
        api, None, "pause", "--provider", "sim", JOBGATE_CREDENTIALS_PATH=str(saved)
    )
    assert result.exit_code == 0, result.stderr
    assert len(await api.runtime.storage.pause_list()) == 1


async def test_refusals_are_one_line(api: Api, tmp_path: Path) -> None:
    operator = await api.runtime.operators.create("alice")
    tenant_key = await api.key("acme")
    as_tenant = await jobgate(api, tenant_key, "pause", "--provider", "sim")
    assert as_tenant.exit_code == 2 and "operator key" in as_tenant.stderr
    nothing = tmp_path / "none.json"
    no_key = await jobgate(api, None, "pauses", JOBGATE_CREDENTIALS_PATH=str(nothing))
    assert no_key.exit_code == 2 and "need an operator key" in no_key.stderr
    unknown = await jobgate(api, operator, "pause", "--provider", "nope")
    assert unknown.exit_code == 2 and "unknown provider 'nope'" in unknown.stderr
    missing = await jobgate(api, operator, "resume", "pause_missing")
    assert missing.exit_code == 1 and "pause_missing" in missing.stderr
    neither = await jobgate(api, operator, "resume")
    assert neither.exit_code == 2 and "jobgate resume ID, or --all" in neither.stderr
    for result in (as_tenant, no_key, unknown, missing, neither):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert await api.runtime.storage.pause_list() == []
