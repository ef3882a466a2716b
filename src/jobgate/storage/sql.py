"""Named SQL blocks, one `.sql` file set per dialect.

A block starts with `-- name: block_name`, then one `-- description` line, then the statement.
Parameters are written `:name` in both dialects; for PostgreSQL they are rewritten to `$n`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


@dataclasses.dataclass(frozen=True, slots=True)
class Query:
    name: str
    description: str
    sql: str
    params: tuple[str, ...]  # distinct parameter names in order of first use
    positional_sql: str  # `:name` rewritten to `$n`

    def args(self, values: Mapping[str, Any]) -> list[Any]:
        """Positional arguments for `positional_sql`; a missing parameter is a KeyError."""
        return [values[name] for name in self.params]


def _compile(name: str, description: str, sql: str) -> Query:
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        param = match.group(1)
        if param not in order:
            order.append(param)
        return f"${order.index(param) + 1}"

    positional = _PARAM.sub(number, sql)
    return Query(name, description, sql, tuple(order), positional)


def parse(text: str, *, source: str = "<sql>") -> dict[str, Query]:
    queries: dict[str, Query] = {}
    matches = list(_NAME.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip("\n")
        lines = body.splitlines()
        if not lines or not lines[0].startswith("--"):
            raise ValueError(f"{source}: query {match.group(1)} lacks a description line")
        description = lines[0].lstrip("- ").strip()
        sql = "\n".join(lines[1:]).strip().rstrip(";")
        name = match.group(1)
        if name in queries:
            raise ValueError(f"{source}: query {name} is defined twice")
        queries[name] = _compile(name, description, sql)
    return queries


def load(package: str) -> dict[str, Query]:
    """Every block of every `queries*.sql` file in `package` (e.g. jobgate.storage.sqlite)."""
    queries: dict[str, Query] = {}
    for entry in sorted(resources.files(package).iterdir(), key=lambda e: e.name):
        if entry.name.startswith("queries") and entry.name.endswith(".sql"):
            for name, query in parse(entry.read_text(), source=entry.name).items():
                if name in queries:
                    raise ValueError(f"{entry.name}: query {name} is defined twice")
                queries[name] = query
    return queries
