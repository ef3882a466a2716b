"""The layering the tree promises (docs/architecture.md): services orchestrate without knowing
the edges or the server, storage and the wake-up hub know nothing above them, and only the CLI
(and tests, benchmarks) reach for the composition root in `process/`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jobgate

PACKAGE = Path(jobgate.__file__).parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _offenders(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad: dict[str, list[str]] = {}
    for path in paths:
        hits = sorted(
            name
            for name in _imports(path)
            if any(name == f or name.startswith(f + ".") for f in forbidden)
        )
        if hits:
            bad[str(path.relative_to(PACKAGE))] = hits
    return bad


@pytest.mark.parametrize(
    ("modules", "forbidden"),
    [
        (
            "domain",
            (
                "jobgate.storage",
                "jobgate.services",
                "jobgate.providers",
                "jobgate.http",
                "jobgate.process",
                "jobgate.cli",
                "jobgate.wakeups",
            ),
        ),
        ("services", ("uvicorn", "jobgate.http", "jobgate.process", "jobgate.cli")),
        ("storage", ("jobgate.services", "jobgate.http", "jobgate.process", "jobgate.cli")),
        ("wakeups.py", ("jobgate.storage", "jobgate.services", "jobgate.http", "jobgate.process")),
        ("http", ("jobgate.process", "jobgate.cli")),
    ],
)
def test_a_layer_does_not_import_the_layers_above_it(
    modules: str, forbidden: tuple[str, ...]
) -> None:
    root = PACKAGE / modules
    paths = [root] if root.is_file() else sorted(root.rglob("*.py"))
    assert _offenders(paths, forbidden) == {}


def test_only_the_cli_imports_the_composition_root() -> None:
    outside = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in ("process", "cli")
    ]
    assert _offenders(outside, ("jobgate.process",)) == {}


def _storage_uses(path: Path) -> list[int]:
    """Lines where a module reaches for `.storage` (a store handed to it, or a call on one)."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "storage"
    )


def test_the_dashboard_and_console_read_through_dashboard_views() -> None:
    """The operator pages stay an HTTP edge: every read and action across tenants goes
    through services/dashboard_views.py (`ctx.dashboard`), never to the store itself."""
    pages = sorted((PACKAGE / "http" / "console").glob("*.py"))
    assert PACKAGE / "http" / "console" / "dashboard.py" in pages
    uses = {str(path.relative_to(PACKAGE)): _storage_uses(path) for path in pages}
    assert {name: lines for name, lines in uses.items() if lines} == {}
