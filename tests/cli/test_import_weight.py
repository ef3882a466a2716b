"""The CLI's admin commands (tenants, keys, jobs, webhooks...) open a Runtime without serving
HTTP: they must not import the web application (FastAPI, its routes) or the process roles,
about half of every such command's start-up. `jobgate simulator` imports none of the server
(no storage, no runtime, no web application): it starts in the time the simulator loads."""

from __future__ import annotations

import subprocess
import sys


def test_the_admin_cli_imports_neither_the_web_app_nor_the_roles() -> None:
    probe = (
        "import sys, jobgate.cli, jobgate.cli.common, jobgate.cli.admin;"
        "heavy = sorted(m for m in sys.modules if m == 'fastapi' or m.startswith("
        "('fastapi.', 'jobgate.http', 'jobgate.process.roles', 'uvicorn')));"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""


def _loaded(modules: str) -> set[str]:
    """The modules loaded in a new interpreter after importing `modules` (comma-separated)."""
    probe = f"import sys, {modules}; print(','.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(out.stdout.strip().split(","))


def test_the_simulator_command_imports_none_of_the_server() -> None:
    loaded = _loaded("jobgate.cli, jobgate.cli.providers")
    server = ("jobgate.storage", "jobgate.process", "jobgate.http", "jobgate.services")
    heavy = sorted(
        m for m in loaded if m.startswith(server) or m.split(".")[0] in ("fastapi", "asyncpg")
    )
    assert heavy == []
    assert "jobgate.simulator.server" in loaded  # the probe imported the command's module
