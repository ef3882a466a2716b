"""Operator commands through the real CLI entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
