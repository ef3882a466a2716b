"""requirements-dev.lock, the constraints CI installs with, covers pyproject's dependencies and
its `dev` extra at versions their ranges admit (a stale lock after a pyproject change fails
here, naming the package, instead of failing pip in CI)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).parents[2]


def _locked() -> dict[str, list[tuple[Version, Marker | None]]]:
    pins: dict[str, list[tuple[Version, Marker | None]]] = {}
    for line in (ROOT / "requirements-dev.lock").read_text().splitlines():
        if not line or line.startswith((" ", "#")):
            continue
        requirement = Requirement(line)
        [spec] = requirement.specifier
        assert spec.operator == "==", line
        pins.setdefault(canonicalize_name(requirement.name), []).append(
            (Version(spec.version), requirement.marker)
        )
    return pins


def _wanted() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(spec) for spec in project["dependencies"]] + [
        Requirement(spec) for spec in project["optional-dependencies"]["dev"]
    ]


def test_the_lock_pins_every_dependency_within_its_range() -> None:
    locked = _locked()
    stale = []
    for requirement in _wanted():
        pins = locked.get(canonicalize_name(requirement.name), [])
        here = [v for v, marker in pins if marker is None or marker.evaluate()]
        if len(here) != 1 or here[0] not in requirement.specifier:
            stale.append(f"{requirement} (locked: {[str(v) for v in here]})")
    assert not stale, f"requirements-dev.lock is stale, see CONTRIBUTING.md: {stale}"


def test_ci_installs_with_the_lock() -> None:
    assert "pip install -q -c requirements-dev.lock -e '.[dev]'" in (ROOT / ".ci/run").read_text()
