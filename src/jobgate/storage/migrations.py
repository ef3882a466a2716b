"""Numbered SQL migrations per dialect (`migrations/NNNN_name.sql`), the same versions in each."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from importlib import resources

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def available(package: str) -> list[Migration]:
    """The migrations shipped for one dialect, in version order."""
    found: list[Migration] = []
    for entry in resources.files(package).joinpath("migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ValueError(f"{package}: two migrations share a version number")
    return found


def pending(package: str, applied: Collection[int]) -> list[Migration]:
    """The migrations of one dialect not applied yet, in version order."""
    return [migration for migration in available(package) if migration.version not in applied]
