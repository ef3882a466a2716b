"""A server process that cannot run says why in one line, before it claims to have started:
no "listening" banner, no key issued, no traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)
ROLES = ("serve", "api", "worker", "reaper", "dispatcher", "reconciler")


def jobgate(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    full_env = {**base, "XDG_CONFIG_HOME": str(cwd / "config"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jobgate", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The process's only line on stderr (log lines aside), and no traceback anywhere."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_serve_says_listening_only_once_its_provider_keys_are_there(tmp_path: Path) -> None:
    (tmp_path / "jobgate.toml").write_text(
        '[providers.upstream]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "UPSTREAM_API_KEY"\n'
    )
    result = jobgate("serve", "--port", "0", cwd=tmp_path)
    assert result.returncode == 2
    assert "UPSTREAM_API_KEY" in one_line(result)
    assert "listening" not in result.stdout and "jg_" not in result.stdout
    assert not (tmp_path / "config" / "jobgate" / "credentials.json").exists()


def test_serve_says_listening_only_once_its_database_answered(tmp_path: Path) -> None:
    unreachable = "postgresql://nobody@127.0.0.1:1/jobgate"
    result = jobgate("serve", "--port", "0", "--database-url", unreachable, cwd=tmp_path)
    assert result.returncode == 1
    assert one_line(result).startswith("jobgate: cannot reach the database")
    assert "listening" not in result.stdout


@pytest.mark.parametrize(
    "url", ["sqlite:jobgate.db", "mysql://jobgate@db/jobgate"], ids=["sqlite-2-slashes", "mysql"]
)
def test_serve_refuses_a_database_url_in_one_line(tmp_path: Path, url: str) -> None:
    result = jobgate("serve", "--port", "0", "--database-url", url, cwd=tmp_path)
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith("jobgate: configuration error: --database-url: ")
    assert "postgresql 127" not in result.stdout and "listening" not in result.stdout


@pytest.mark.parametrize("command", ["simulator", "serve", "api", "listen"])
def test_a_port_in_use_is_one_line(tmp_path: Path, busy_port: int, command: str) -> None:
    extra = ("--secret", "whsec_" + "a" * 44) if command == "listen" else ()
    result = jobgate(command, "--port", str(busy_port), *extra, cwd=tmp_path)
    assert result.returncode == 1
    assert one_line(result) == f"jobgate: cannot listen on 127.0.0.1:{busy_port}: " + (
        "Address already in use"
    )


def test_a_missing_broker_client_is_one_line_at_every_roles_start(tmp_path: Path) -> None:
    """As if `pip install jobgate` without the redis extra: the redis package cannot be
    imported. Every role refuses at its start, naming the extra."""
    shim = tmp_path / "shim" / "redis"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'redis'\", name='redis')\n"
    )
    env = {
        "PYTHONPATH": str(shim.parent),
        "JOBGATE_TRANSPORT": "redis://127.0.0.1:6379/0",
        "JOBGATE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobgate.db'}",
    }
    for role in ROLES:
        args = (role, "--port", "0") if role in ("serve", "api") else (role,)
        result = jobgate(*args, cwd=tmp_path, env=env)
        assert result.returncode == 2, (role, result.stderr)
        line = one_line(result)
        assert line.startswith("jobgate: configuration error: JOBGATE_TRANSPORT: "), role
        assert "pip install 'jobgate[redis]'" in line, role
        assert "running" not in result.stdout and "listening" not in result.stdout


def test_the_batches_role_refuses_to_start_without_a_native_batch_providers_key(
    tmp_path: Path,
) -> None:
    (tmp_path / "jobgate.toml").write_text(
        '[providers.upstream]\nkind = "anthropic"\nbase_url = "http://127.0.0.1:9"\n'
        'api_key_env = "UPSTREAM_API_KEY"\nnative_batches = true\n'
    )
    env = {"JOBGATE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobgate.db'}"}
    result = jobgate("serve", "--roles", "batches", cwd=tmp_path, env=env)
    assert result.returncode == 2
    line = one_line(result)
    assert line.startswith("jobgate: configuration error: providers.upstream.api_key_env: ")
    assert "UPSTREAM_API_KEY" in line and "running" not in result.stdout
