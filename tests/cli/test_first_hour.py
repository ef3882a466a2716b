"""What a new user meets first on the command line: grouped help, human output without log
lines or Python reprs, saved credentials per server, `login` and `key`, `submit --latency`."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from jobgate.client import credentials
from jobgate.wire import standard_webhooks
from tests.cli.test_admin import run_one_job
from tests.support.processes import free_port

pytestmark = pytest.mark.timeout(120)


def jobgate(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("JOBGATE_")}
    full_env = {**base, "XDG_CONFIG_HOME": str(cwd / "config"), "COLUMNS": "100", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "jobgate.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_groups_commands_and_cuts_no_description(tmp_path: Path) -> None:
    shown = jobgate("--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    servers, operators, clients = (
        text.index("Server roles"),
        text.index("Operators"),
        text.index("Clients"),
    )
    assert servers < operators < clients
    assert text.index("  reconciler") < operators < text.index("  tenants") < clients
    assert text.index("  submit") > clients and text.index("  login") > clients
    assert "..." not in text.split("Options:")[1]  # click's truncation mark
    joined = " ".join(text.split())
    assert "status checks, cancels and settlements of background jobs." in joined
    tenants = jobgate("tenants", "--help", cwd=tmp_path).stdout
    assert "..." not in tenants.split("Commands:")[1]
    assert "in every process within 2 s)." in " ".join(tenants.split())


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_tenants_show_reads_as_text_without_logs_or_reprs(backend: str, tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'jobgate.db'}"
    config = tmp_path / "jobgate.toml"
    config.write_text("")  # the built-in sim has no prices: its usage used to log a warning
    run_one_job(database_url, config)
    shown = jobgate(
        "tenants", "show", "acme", cwd=tmp_path, env={"JOBGATE_DATABASE_URL": database_url}
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""
    assert "()" not in shown.stdout and "{" not in shown.stdout and "[" not in shown.stdout
    lines = dict(line.split(None, 1) for line in shown.stdout.strip().splitlines())
    assert lines["allowed_models"] == "any"
    assert lines["max_running"] == "0 (unlimited)"
    assert lines["tenant"] == "acme"


def test_credentials_are_kept_per_server_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "config" / "jobgate" / "credentials.json"
    path.parent.mkdir(parents=True)
    # The format older versions wrote: one entry per URL with the tenant key only.
    path.write_text(
        json.dumps({"http://127.0.0.1:8000": {"api_key": "jg_old", "tenant": "default"}})
    )
    path.chmod(0o644)
    credentials.save(path, "http://127.0.0.1:8001/", api_key="jg_two", operator_key="jgo_two")
    credentials.save(path, "http://127.0.0.1:8000", operator_key="jgo_one")
    saved = json.loads(path.read_text())
    assert saved == {
        "http://127.0.0.1:8000": {
            "api_key": "jg_old",
            "tenant": "default",
            "operator_key": "jgo_one",
        },
        "http://127.0.0.1:8001": {"api_key": "jg_two", "operator_key": "jgo_two"},
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not list(path.parent.glob("*.tmp"))
    env = {"JOBGATE_CREDENTIALS_PATH": str(path)}
    assert credentials.saved_key("http://127.0.0.1:8000", env) == "jg_old"
    assert credentials.saved_key("http://127.0.0.1:8001", env) == "jg_two"
    path.write_text("not json")  # a broken file reads as empty, and is replaced whole
    credentials.save(path, "http://h:1", api_key="jg_x")
    assert json.loads(path.read_text()) == {"http://h:1": {"api_key": "jg_x"}}


def test_login_saves_a_key_and_key_prints_it(tmp_path: Path) -> None:
    url = "http://127.0.0.1:9"  # nothing listens there: the key is saved, with a note
    saved = jobgate("login", url, "jg_first", cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    assert f"saved the API key for {url}" in saved.stdout
    assert "did not answer" in saved.stderr
    assert jobgate("login", url + "/", "jgo_op", cwd=tmp_path).returncode == 0
    assert jobgate("key", "--url", url, cwd=tmp_path).stdout.strip() == "jg_first"
    operator = jobgate("key", "--operator", cwd=tmp_path, env={"JOBGATE_URL": url})
    assert operator.stdout.strip() == "jgo_op"
    path = tmp_path / "config" / "jobgate" / "credentials.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    missing = jobgate("key", "--url", "http://127.0.0.1:10", cwd=tmp_path)
    assert missing.returncode == 1 and "jobgate login URL KEY" in missing.stderr
    bad = jobgate("login", url, "sk-not-ours", cwd=tmp_path)
    assert bad.returncode == 2 and "jg_" in bad.stderr


def test_operator_commands_never_create_an_empty_database_here(tmp_path: Path) -> None:
    """No saved server, no JOBGATE_DATABASE_URL, no ./jobgate.db: one line saying what to set,
    not a fresh database that then has no tenant in it."""
    for args in (("tenants", "show", "default"), ("operators", "create", "ops")):
        refused = jobgate(*args, cwd=tmp_path, env={"JOBGATE_URL": "http://localhost:8000"})
        assert refused.returncode == 1, refused.stdout
        assert refused.stderr.strip().count("\n") == 0
        assert "JOBGATE_DATABASE_URL" in refused.stderr
        assert "http://localhost:8000" in refused.stderr
        assert not (tmp_path / "jobgate.db").exists()


def test_submit_latency_needs_a_simulated_model(tmp_path: Path) -> None:
    refused = jobgate(
        "submit", "-m", "hi", "--model", "gpt-4.1-mini", "--latency", "20", "--api-key", "jg_x",
        cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "--latency simulates a slow provider" in refused.stderr


def test_concurrent_saves_keep_every_server(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    code = (
        "import sys; from pathlib import Path; from jobgate.client import credentials\n"
        "for i in range(20):\n"
        "    url = f'http://h:{sys.argv[2]}{i:02d}'\n"
        "    credentials.save(Path(sys.argv[1]), url, api_key='jg_x')\n"
    )
    writers = [
        subprocess.Popen([sys.executable, "-c", code, str(path), str(n)]) for n in range(1, 5)
    ]
    assert [writer.wait(timeout=60) for writer in writers] == [0, 0, 0, 0]
    assert len(json.loads(path.read_text())) == 80


def test_a_misspelt_api_key_variable_is_named(tmp_path: Path) -> None:
    refused = jobgate("status", "job_x", cwd=tmp_path, env={"JOBGATE_APIKEY": "jg_x"})
    assert refused.returncode == 2
    assert "JOBGATE_APIKEY is set: did you mean JOBGATE_API_KEY?" in refused.stderr
    assert "jobgate login URL KEY" in refused.stderr


def test_listen_prints_verified_events_once_and_refuses_forged_ones(tmp_path: Path) -> None:
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    port = free_port()
    with subprocess.Popen(
        [sys.executable, "-m", "jobgate.cli", "listen", "--port", str(port), "--secret", secret,
         "--count", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as listener:  # fmt: skip
        url = f"http://127.0.0.1:{port}/jobgate"
        for _ in range(300):
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.05)

        def deliver(event_id: str, *, key: str = secret) -> int:
            body = json.dumps({"id": event_id, "type": "job.succeeded"}).encode()
            headers = standard_webhooks.signed_headers([key], event_id, int(time.time()), body)
            return httpx.post(url, content=body, headers=headers, timeout=10).status_code

        forged = "whsec_" + base64.b64encode(b"x" * 32).decode()
        assert deliver("evt_1", key=forged) == 400
        assert deliver("evt_1") == 204
        assert deliver("evt_1") == 204  # a redelivery: acknowledged, not printed again
        assert deliver("evt_2") == 204
        out, err = listener.communicate(timeout=30)
    assert listener.returncode == 0
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["evt_1", "evt_2"]
    assert "refused a delivery" in err and "listening on" in err
