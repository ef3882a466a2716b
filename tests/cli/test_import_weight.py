"""The CLI's admin commands (tenants, keys, jobs, webhooks...) open a Runtime without serving
HTTP: they must not import the web application (FastAPI, its routes) or the process roles,
about half of every such command's start-up (~0.5 s of CPU each) before this was guarded."""

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
