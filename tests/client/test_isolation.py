"""The client ships alone: it imports httpx and the standard library, never server code."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import jobgate.client

CLIENT_DIR = Path(jobgate.client.__file__).parent
SERVER_LIBRARIES = {"fastapi", "starlette", "pydantic", "uvicorn", "asyncpg", "orjson", "click"}


def test_importing_the_client_loads_no_server_module_or_server_library() -> None:
    code = "import json, sys; import jobgate.client; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.check_output([sys.executable, "-c", code], text=True))
    jobgate_modules = {m for m in loaded if m.split(".")[0] == "jobgate"}
    outside = {m for m in jobgate_modules if m != "jobgate" and not m.startswith("jobgate.client")}
    assert outside == set()
    # (click is left out: httpx itself imports it, for its own command line, when installed)
    assert (SERVER_LIBRARIES - {"click"}).isdisjoint(m.split(".")[0] for m in loaded)


def test_no_client_module_imports_from_jobgate_outside_the_client() -> None:
    for path in CLIENT_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in SERVER_LIBRARIES, f"{path.name} imports {name}"
                if top == "jobgate":
                    assert name.startswith("jobgate.client"), f"{path.name} imports {name}"
