"""Named SQL blocks, one `.sql` file set per dialect.

A block starts with `-- name: block_name`, then one `-- description` line, then the statement.
Parameters are written `:name` in both dialects; for PostgreSQL they are rewritten to `$n`.
A `-- fragment: fragment_name` block is a piece of SQL that several statements share (a rule
that must live in one place); a statement, or another fragment, includes it by writing
`{{fragment_name}}`. The fragments `live_states` and `terminal_states` are the domain's state
sets (`jobgate.domain.states`) written out, so that no statement lists job states by hand:
`WHERE j.state IN ({{terminal_states}})`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from jobgate.domain import states

_NAME = re.compile(r"^--\s*(name|fragment):\s*(\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{(\w+)\}\}")
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def _listed(of: frozenset[states.JobState] | tuple[states.JobState, ...]) -> str:
    return ", ".join(f"'{state.value}'" for state in states.in_order(of))


# Fragments every statement may include, derived from the domain's state sets.
DOMAIN_FRAGMENTS: dict[str, str] = {
    "live_states": _listed(states.LIVE_STATES),
    "terminal_states": _listed(states.TERMINAL_STATES),
}


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


def _blocks(text: str, source: str) -> list[tuple[str, str, str, str]]:
    """(kind, name, description, sql) of every block in `text`."""
    blocks = []
    matches = list(_NAME.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip("\n")
        lines = body.splitlines()
        if not lines or not lines[0].startswith("--"):
            raise ValueError(f"{source}: query {match.group(2)} lacks a description line")
        description = lines[0].lstrip("- ").strip()
        sql = "\n".join(lines[1:]).strip().rstrip(";")
        blocks.append((match.group(1), match.group(2), description, sql))
    return blocks


def _include(
    sql: str, fragments: Mapping[str, str], source: str, within: tuple[str, ...] = ()
) -> str:
    """`sql` with each `{{fragment}}` replaced by its text, fragments included by fragments
    too (a fragment that includes itself, directly or not, is an error)."""

    def fragment(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in fragments:
            raise ValueError(f"{source}: no fragment {name!r}")
        if name in within:
            raise ValueError(f"{source}: fragment {name!r} includes itself")
        return _include(fragments[name], fragments, source, (*within, name))

    return _INCLUDE.sub(fragment, sql)


def parse(text: str, *, source: str = "<sql>") -> dict[str, Query]:
    return _parse_files([(source, text)])


def _parse_files(files: Iterable[tuple[str, str]]) -> dict[str, Query]:
    """Every statement of the (source, text) `files`; a fragment defined in any of them may be
    included by a statement of any other."""
    blocks = [(source, *block) for source, text in files for block in _blocks(text, source)]
    fragments = dict(DOMAIN_FRAGMENTS)
    for source, kind, name, _, sql in blocks:
        if kind == "fragment":
            if name in DOMAIN_FRAGMENTS:
                raise ValueError(f"{source}: fragment {name} is the domain's, not a file's")
            fragments[name] = sql
    queries: dict[str, Query] = {}
    for source, kind, name, description, sql in blocks:
        if kind == "fragment":
            continue
        if name in queries:
            raise ValueError(f"{source}: query {name} is defined twice")
        queries[name] = _compile(name, description, _include(sql, fragments, source))
    return queries


def load(package: str) -> dict[str, Query]:
    """Every block of every `queries*.sql` file in `package` (e.g. jobgate.storage.sqlite)."""
    return _parse_files(
        (entry.name, entry.read_text())
        for entry in sorted(resources.files(package).iterdir(), key=lambda e: e.name)
        if entry.name.startswith("queries") and entry.name.endswith(".sql")
    )
