"""Fenced code blocks of the Markdown docs and the directives above them (docs/writing-docs.md):
`<!-- not-run: REASON -->`, `<!-- expect: TEXT -->`, `<!-- run: continues -->`,
`<!-- run: postgres -->`, `<!-- needs: TOOL -->`; and the order a reader meets the documents."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELLS = frozenset({"sh", "bash", "shell"})
RUNNABLE = SHELLS | {"python"}
# Written by `python -m bench`, so a directive in it would not survive the next run.
NOT_RUN_DOCUMENTS = {"docs/benchmarks.md": "written by python -m bench"}
# continues: the previous block of the language first; postgres: a process recipe, run by
# tests/e2e/test_docs_recipes.py against a fresh PostgreSQL database.
RUN_OPTIONS = frozenset({"continues", "postgres"})

_FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_DIRECTIVE = re.compile(r"^<!--\s*(not-run|expect|run|needs)\s*:\s*(.*?)\s*-->$")
_LINK = re.compile(r"\(docs/([\w-]+\.md)")


@dataclasses.dataclass(frozen=True)
class Block:
    document: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    not_run: str | None = None
    expects: tuple[str, ...] = ()
    options: frozenset[str] = frozenset()
    needs: tuple[str, ...] = ()  # commands the block runs beyond jobgate, python3 and curl

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and self.not_run is None


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def reading_order() -> list[Path]:
    """The README, then the documents in the order the README first links them, then the
    others by name: the order a reader meets them."""
    linked = _LINK.findall((ROOT / "README.md").read_text())
    order = {name: index for index, name in enumerate(dict.fromkeys(linked))}
    rest = documents()[1:]
    return [documents()[0], *sorted(rest, key=lambda p: (order.get(p.name, len(order)), p.name))]


def _directives(lines: list[str], fence_index: int, where: str) -> list[tuple[str, str]]:
    """The directive comments on the lines just above a fence, top to bottom."""
    found: list[tuple[str, str]] = []
    index = fence_index - 1
    while index >= 0:
        text = lines[index].strip()
        match = _DIRECTIVE.match(text)
        if match is None:
            if text.startswith("<!--") and any(w in text for w in ("not-run", "expect", "needs")):
                raise ValueError(f"{where}: malformed directive {text!r}")
            break
        found.append((match.group(1), match.group(2)))
        index -= 1
    return list(reversed(found))


def parse(path: Path) -> list[Block]:
    document = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
    return parse_text(path.read_text(), document)


def parse_text(text: str, document: str) -> list[Block]:
    lines = text.split("\n")
    blocks = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        where = f"{document}:{line}"
        not_run: str | None = None
        expects: list[str] = []
        options: set[str] = set()
        needs: list[str] = []
        for kind, value in _directives(lines, line - 1, where):
            if kind == "not-run":
                if not value:
                    raise ValueError(f"{where}: not-run needs a reason")
                not_run = value
            elif kind == "expect":
                expects.append(value)
            elif kind == "needs":
                if not value:
                    raise ValueError(f"{where}: needs names a command")
                needs.extend(v.strip() for v in value.split(",") if v.strip())
            else:
                unknown = {o.strip() for o in value.split(",")} - RUN_OPTIONS
                if unknown:
                    raise ValueError(f"{where}: unknown run option(s) {sorted(unknown)}")
                options |= {o.strip() for o in value.split(",")}
        if document in NOT_RUN_DOCUMENTS and not_run is None:
            not_run = NOT_RUN_DOCUMENTS[document]
        blocks.append(
            Block(
                document,
                line,
                match.group(1).lower(),
                match.group(2),
                not_run,
                tuple(expects),
                frozenset(options),
                tuple(needs),
            )
        )
    return blocks


def runnable(blocks: list[Block]) -> list[tuple[Block, str]]:
    """Each block to run with the code to run for it (with `continues`, its predecessors')."""
    chosen: list[tuple[Block, str]] = []
    previous: dict[str, str] = {}
    for block in blocks:
        if block.language not in RUNNABLE:
            continue
        kind = "sh" if block.language in SHELLS else "python"
        code = block.code
        if "continues" in block.options:
            if kind not in previous:
                raise ValueError(f"{block.where}: `continues` but no earlier {kind} block")
            code = previous[kind] + "\n" + code
        if block.runs:  # a block that does not run is no predecessor
            previous[kind] = code
            chosen.append((block, code))
    return chosen
