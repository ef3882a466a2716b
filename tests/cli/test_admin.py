"""Operator commands through the real CLI entry point."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from jobgate.config import load_settings
from jobgate.process.runtime import Runtime
from jobgate.services.jobs import SubmitSpec

pytestmark = pytest.mark.timeout(120)


def jobgate(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jobgate.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'jobgate.db'}"
    return str(request.getfixturevalue("pg_dsn"))


def test_tenants_and_keys(database_url: str, tmp_path: Path) -> None:
    env = {"JOBGATE_DATABASE_URL": database_url}
    created = jobgate("tenants", "create", "acme", "--json", cwd=tmp_path, env=env)
    assert created.returncode == 0, created.stderr
    info = json.loads(created.stdout)
    assert info["tenant"] == "acme" and info["api_key"].startswith("jg_")
    again = jobgate("tenants", "create", "acme", cwd=tmp_path, env=env)
    assert again.returncode == 1 and "already exists" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    listed = json.loads(jobgate("tenants", "list", "--json", cwd=tmp_path, env=env).stdout)
    assert [t["tenant"] for t in listed] == ["acme"]
    issued = json.loads(
        jobgate("keys", "create", "--tenant", "acme", "--json", cwd=tmp_path, env=env).stdout
    )
    keys = json.loads(
        jobgate("keys", "list", "--tenant", "acme", "--json", cwd=tmp_path, env=env).stdout
    )
    assert len(keys) == 2 and all(info["api_key"] not in json.dumps(k) for k in keys)
    assert jobgate("keys", "revoke", issued["key_id"], cwd=tmp_path, env=env).returncode == 0
    assert jobgate("keys", "revoke", "key_nope", cwd=tmp_path, env=env).returncode == 1
    migrated = jobgate("migrate", cwd=tmp_path, env=env)
    assert migrated.returncode == 0 and "up to date" in migrated.stdout


def test_bad_configuration_is_one_line_exit_2(tmp_path: Path) -> None:
    result = jobgate("tenants", "list", cwd=tmp_path, env={"JOBGATE_LEASE_TTL_S": "never"})
    assert result.returncode == 2
    assert result.stderr.strip().startswith("jobgate: configuration error: JOBGATE_LEASE_TTL_S")
    assert len(result.stderr.strip().splitlines()) == 1


PRICED_SIM = """
[providers.sim]
kind = "sim"
model_prefixes = ["sim-"]
[providers.sim.prices]
"*" = { input_per_mtok = 1000, output_per_mtok = 3000 }
"""


def run_one_job(database_url: str, config: Path) -> Decimal:
    """Create tenant acme and run one simulated job for it in-process; what it cost."""

    async def work() -> Decimal:
        settings = load_settings({}, config_path=config, database_url=database_url)
        runtime = Runtime(settings)
        await runtime.open(migrate=True)
        try:
            tenant = (await runtime.tenants.create("acme")).tenant
            body = {"model": "sim-echo", "messages": [{"role": "user", "content": "hello"}]}
            spec = SubmitSpec(endpoint="/v1/chat/completions", body=body)
            await runtime.jobs.submit(tenant_id=tenant.id, spec=spec)
            [done] = await runtime.worker().run_once()
            assert done is not None
            [entry] = await runtime.storage.usage_for_job(job_id=done.id)
            return Decimal(entry.input_tokens * 1000 + entry.output_tokens * 3000) / 1_000_000
        finally:
            await runtime.close()

    return asyncio.run(work())


def test_tenant_cost_budget_and_spend_today(database_url: str, tmp_path: Path) -> None:
    config = tmp_path / "jobgate.toml"
    config.write_text(PRICED_SIM + "[tenants.acme]\ndaily_cost_budget_usd = 1.25\n")
    cost = run_one_job(database_url, config)
    assert cost > 0
    env = {"JOBGATE_DATABASE_URL": database_url}

    shown = jobgate("tenants", "show", "acme", "--json", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    limits = json.loads(shown.stdout)
    assert limits["daily_cost_budget_usd"] == 1.25  # from jobgate.toml
    assert limits["spend_today_usd"] == float(round(cost, 6))

    changed = jobgate(
        "tenants", "set", "acme", "--daily-cost-budget-usd", "0.75", "--json", cwd=tmp_path, env=env
    )
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["daily_cost_budget_usd"] == 0.75
    text = jobgate("tenants", "show", "acme", cwd=tmp_path, env=env).stdout
    assert "daily_cost_budget_usd  0.75" in text
    assert f"spend_today_usd        {float(round(cost, 6))}" in text

    refused = jobgate(
        "tenants", "set", "acme", "--daily-cost-budget-usd", "-1", cwd=tmp_path, env=env
    )
    assert refused.returncode == 2 and "--daily-cost-budget-usd" in refused.stderr
    reset = jobgate("tenants", "set", "acme", "--reset", "--json", cwd=tmp_path, env=env)
    assert json.loads(reset.stdout)["daily_cost_budget_usd"] == 1.25
    assert json.loads(reset.stdout)["max_running_per_key"] == 0

    per_key = jobgate(
        "tenants", "set", "acme", "--max-running-per-key", "2", "--json", cwd=tmp_path, env=env
    )
    assert json.loads(per_key.stdout)["max_running_per_key"] == 2
    assert (
        "max_running_per_key    2"
        in jobgate("tenants", "show", "acme", cwd=tmp_path, env=env).stdout
    )


def test_limits_per_key_are_set_shown_and_bounded(database_url: str, tmp_path: Path) -> None:
    env = {"JOBGATE_DATABASE_URL": database_url}
    assert jobgate("tenants", "create", "acme", cwd=tmp_path, env=env).returncode == 0
    changed = jobgate(
        "tenants", "set", "acme", "--rpm-per-key", "30", "--daily-token-budget-per-key",
        "50000", "--daily-cost-budget-usd-per-key", "0.5", "--json", cwd=tmp_path, env=env,
    )  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    shown = json.loads(changed.stdout)
    assert (shown["rpm_per_key"], shown["daily_token_budget_per_key"]) == (30, 50_000)
    assert shown["daily_cost_budget_usd_per_key"] == 0.5
    text = jobgate("tenants", "show", "acme", cwd=tmp_path, env=env).stdout
    assert "rpm_per_key            30" in text
    assert "daily_cost_budget_usd_per_key 0.5" in text
    kept = jobgate("tenants", "set", "acme", "--max-running", "4", "--json", cwd=tmp_path, env=env)
    assert json.loads(kept.stdout)["rpm_per_key"] == 30  # other overrides stay
    reset = jobgate("tenants", "set", "acme", "--reset", "--json", cwd=tmp_path, env=env)
    assert json.loads(reset.stdout)["rpm_per_key"] == 0
    assert (
        "rpm_per_key            0 (unlimited)"
        in jobgate("tenants", "show", "acme", cwd=tmp_path, env=env).stdout
    )
    for flag, value in [
        ("--rpm-per-key", "-1"),
        ("--rpm-per-key", "10000001"),
        ("--rpm-per-key", "1.5"),
        ("--daily-token-budget-per-key", "many"),
        ("--daily-token-budget-per-key", str(10**15 + 1)),
        ("--daily-cost-budget-usd-per-key", "nan"),
        ("--daily-cost-budget-usd-per-key", "-0.01"),
        ("--daily-cost-budget-usd-per-key", "1e10"),
    ]:
        refused = jobgate("tenants", "set", "acme", flag, value, cwd=tmp_path, env=env)
        assert refused.returncode == 2 and flag in refused.stderr, (flag, value, refused.stderr)
