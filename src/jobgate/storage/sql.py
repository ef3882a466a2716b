"""Named SQL blocks: a file set per dialect, and one set both dialects share.

A block starts with `-- name: block_name`, then one `-- description` line, then the statement.
Parameters are written `:name` in both dialects; for PostgreSQL they are rewritten to `$n`.
A `-- fragment: fragment_name` block is a piece of SQL that several statements share (a rule
that must live in one place); a statement, or another fragment, includes it by writing
`{{fragment_name}}`. The fragments `live_states` and `terminal_states` are the domain's state
sets (`jobgate.domain.states`) written out, so that no statement lists job states by hand:
`WHERE j.state IN ({{terminal_states}})`.

A dialect's statements are its own `queries*.sql` (in its package) and the shared set's
(`sql_shared/queries*.sql`), which both dialects load. A statement the dialects agree on is
written once, in the shared set; where they differ by a small recurring piece (the database's
clock as a default, a parameter's type), the shared statement includes a dialect fragment
(`{{now}}`) that each dialect defines in its `queries_dialect.sql`. The loader holds three rules:
a name (statement or fragment) is defined in one place per dialect, shared or the dialect's,
never both (a dialect's copy would be a silent twin); every shared block compiles for every
dialect; so every fragment a shared block includes exists in every dialect.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
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


# The dialects, by package, and the shared set's folder beside them.
DIALECTS = ("jobgate.storage.postgres", "jobgate.storage.sqlite")
SHARED = "sql_shared"

Files = Sequence[tuple[str, str]]  # (source, text) of each file
_Block = tuple[str, str, str, str, str]  # (source, kind, name, description, sql)


def parse(text: str, *, source: str = "<sql>") -> dict[str, Query]:
    return _parse_files([(source, text)])


def _file_blocks(files: Iterable[tuple[str, str]]) -> list[_Block]:
    return [(source, *block) for source, text in files for block in _blocks(text, source)]


def _defined_once(blocks: Sequence[_Block]) -> None:
    """A name is defined in one place: one block among all the files a dialect loads."""
    seen: dict[str, str] = {}
    for source, kind, name, _, _ in blocks:
        if kind == "fragment" and name in DOMAIN_FRAGMENTS:
            raise ValueError(f"{source}: fragment {name} is the domain's, not a file's")
        if name in seen:
            raise ValueError(f"{source}: {name} is defined twice (also in {seen[name]})")
        seen[name] = source


def _fragments(blocks: Iterable[_Block]) -> dict[str, str]:
    fragments = dict(DOMAIN_FRAGMENTS)
    fragments.update((name, sql) for _, kind, name, _, sql in blocks if kind == "fragment")
    return fragments


def _compiled(blocks: Sequence[_Block]) -> dict[str, Query]:
    fragments = _fragments(blocks)
    return {
        name: _compile(name, description, _include(sql, fragments, source))
        for source, kind, name, description, sql in blocks
        if kind == "name"
    }


def _parse_files(files: Iterable[tuple[str, str]]) -> dict[str, Query]:
    """Every statement of the (source, text) `files`; a fragment defined in any of them may be
    included by a statement of any other."""
    blocks = _file_blocks(files)
    _defined_once(blocks)
    return _compiled(blocks)


def compose(shared: Files, dialects: Mapping[str, Files]) -> dict[str, dict[str, Query]]:
    """Each dialect's statements: its own files' and the `shared` files'. Raises ValueError
    when a name is defined twice within what a dialect loads, or a shared block (statement
    or fragment) does not compile for some dialect."""
    shared_blocks = _file_blocks(shared)
    composed = {}
    for dialect, files in dialects.items():
        blocks = shared_blocks + _file_blocks(files)
        _defined_once(blocks)
        fragments = _fragments(blocks)
        for source, _, name, _, sql in shared_blocks:
            try:
                _include(sql, fragments, source)
            except ValueError as exc:
                raise ValueError(f"shared {name} does not compile for {dialect}: {exc}") from exc
        composed[dialect] = _compiled(blocks)
    return composed


def statement_names(files: Files) -> set[str]:
    """The statements (not fragments) the (source, text) `files` define."""
    return {name for _, kind, name, _, _ in _file_blocks(files) if kind == "name"}


def _files(folder: Traversable, label: str) -> list[tuple[str, str]]:
    return [
        (f"{label}/{entry.name}", entry.read_text())
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.startswith("queries") and entry.name.endswith(".sql")
    ]


def dialect_files(package: str) -> list[tuple[str, str]]:
    """(source, text) of every `queries*.sql` file of the dialect `package` (source: e.g.
    `sqlite/queries.sql`), the shared set's not among them."""
    return _files(resources.files(package), package.rpartition(".")[2])


def shared_files() -> list[tuple[str, str]]:
    """(source, text) of every `queries*.sql` file of the shared set (`sql_shared/…`)."""
    return _files(resources.files("jobgate.storage") / SHARED, SHARED)


@functools.cache
def _every_dialect() -> dict[str, dict[str, Query]]:
    return compose(shared_files(), {p: dialect_files(p) for p in DIALECTS})


def load(package: str) -> dict[str, Query]:
    """Every statement of the dialect `package` (one of DIALECTS, e.g. jobgate.storage.sqlite):
    its `queries*.sql` files' and the shared set's, in a dict of the caller's own."""
    return dict(_every_dialect()[package])
