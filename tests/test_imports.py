"""jobgate's modules import each other along explicit layers, and never in a cycle.

Imports are read with `ast` from every module under src/jobgate: module-level and
function-level imports both count. A layer names the packages (or top-level modules) it may
import besides itself; an import of anything else runs back up. Imports under
`if TYPE_CHECKING:` never run: they obey the layers but cannot close a cycle.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import pathlib
from collections.abc import Iterator

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"

# Top-level modules that import nothing of jobgate beyond one another.
BASE = frozenset(
    {
        "jobgate",
        "errors",
        "clock",
        "ids",
        "config_names",
        "database_urls",
        "failpoints",
        "logs",
        "tracing",
        "metrics",
        "wakeups",
        "alerts",
    }
)


def _above(*layers: str) -> frozenset[str]:
    return BASE | frozenset(layers)


# What each part of jobgate may import, from the bottom up.
MAY_IMPORT: dict[str, frozenset[str]] = {
    **{name: BASE for name in BASE},
    "client": frozenset(),  # the client SDK ships alone
    "wire": _above(),  # wire formats: shapes, checks, translations; no I/O
    "domain": _above("wire"),
    "config": _above("wire", "domain"),
    "storage": _above("wire", "domain", "config"),
    "simulator": _above("wire", "domain", "config"),
    "providers": _above("wire", "domain", "config", "simulator"),
    "testing": _above("wire", "domain", "config", "providers"),
    "transports": _above("wire", "domain", "config", "storage", "providers"),
    "services": _above("wire", "domain", "config", "storage", "providers", "transports"),
    # The roles' loops (worker, reaper, dispatcher, reconciler, batches, relay, intake) use the
    # services; the API never reaches them, process/ starts them.
    "roles": _above("wire", "domain", "config", "storage", "providers", "transports", "services"),
    "http": _above("wire", "domain", "config", "storage", "providers", "services", "transports"),
    "process": _above(
        "wire",
        "domain",
        "config",
        "storage",
        "providers",
        "services",
        "transports",
        "roles",
        "http",
    ),
    "cli": _above(
        "wire",
        "domain",
        "config",
        "storage",
        "providers",
        "services",
        "transports",
        "roles",
        "http",
        "process",
        "simulator",
        "client",
    ),
    "__main__": frozenset({"cli"}),
}

# Within a part: modules that may not import a part its layer otherwise allows.
# Only the in-process simulated provider runs the simulator; the real adapters validate with
# wire/, never with the simulator's functions.
MODULE_LIMITS: dict[str, tuple[str, frozenset[str]]] = {
    "providers": ("simulator", frozenset({"jobgate.providers.simulated"})),
}

# Cycles left to break (each a frozenset of modules); a stale entry fails too.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


@dataclasses.dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    runs: bool  # False under `if TYPE_CHECKING:`


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(path): path for path in (SRC / "jobgate").rglob("*.py")}


def _resolve(name: str) -> str | None:
    """The module `name` is, or the innermost module holding it (a name imported from it)."""
    modules = _modules()
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _names(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names an import statement reads (`from a import b` reads `a.b`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    origin = node.module or ""
    if node.level:
        parts = package.split(".")
        origin = ".".join([*parts[: len(parts) - node.level + 1], *filter(None, [node.module])])
    return [f"{origin}.{alias.name}" for alias in node.names]


def _statements(
    node: ast.AST, runs: bool = True
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under `node`, at any depth, with whether it runs (False under
    `if TYPE_CHECKING:`)."""
    if isinstance(node, ast.If) and _type_checking(node.test):
        for statement in node.body:
            yield from _statements(statement, False)
        for statement in node.orelse:
            yield from _statements(statement, runs)
        return
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, runs
    for child in ast.iter_child_nodes(node):
        yield from _statements(child, runs)


def _imports_of(module: str, path: pathlib.Path) -> list[Import]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node, runs in _statements(ast.parse(path.read_text(), str(path))):
        for name in _names(node, package):
            target = _resolve(name) if name.split(".")[0] == "jobgate" else None
            if target is not None and target != module:
                found.append(Import(module, target, node.lineno, runs))
    return found


@functools.cache
def _all_imports() -> tuple[Import, ...]:
    return tuple(
        found for module, path in _modules().items() for found in _imports_of(module, path)
    )


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(imports: tuple[Import, ...]) -> list[str]:
    problems = []
    for found in imports:
        source, target = _part(found.source), _part(found.target)
        if source == target:
            continue
        allowed = MAY_IMPORT.get(source)
        where = f"{found.source}:{found.line} imports {found.target}"
        if allowed is None:
            problems.append(f"{where}: {source!r} has no layer in MAY_IMPORT")
        elif target not in allowed:
            problems.append(f"{where}: {source!r} may not import {target!r}")
        elif source in MODULE_LIMITS:
            limited, only = MODULE_LIMITS[source]
            if target == limited and found.source not in only:
                problems.append(f"{where}: only {sorted(only)} may import {limited!r}")
    return problems


def cycles(imports: tuple[Import, ...]) -> list[frozenset[str]]:
    """The import cycles: each set of two or more modules that all reach one another."""
    graph: dict[str, set[str]] = {}
    for found in imports:
        if found.runs:
            graph.setdefault(found.source, set()).add(found.target)

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for target in graph.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    reached = {module: reach(module) for module in graph}
    found_cycles = {
        frozenset({module} | {other for other in near if module in reached.get(other, ())})
        for module, near in reached.items()
        if module in near
    }
    return sorted(found_cycles, key=sorted)


def test_every_part_of_jobgate_has_a_layer() -> None:
    assert {_part(module) for module in _modules()} <= set(MAY_IMPORT)


def test_no_import_runs_back_up_the_layers() -> None:
    assert layer_violations(_all_imports()) == []


def test_no_import_cycle() -> None:
    assert set(cycles(_all_imports())) == KNOWN_CYCLES


def test_function_level_imports_count() -> None:
    up = Import("jobgate.domain.states", "jobgate.storage.base", 1, runs=True)
    assert layer_violations((up,)) == [
        "jobgate.domain.states:1 imports jobgate.storage.base: 'domain' may not import 'storage'"
    ]
    lazy = {
        found
        for found in _imports_of("jobgate.cli.client_verbs", _modules()["jobgate.cli.client_verbs"])
        if found.target == "jobgate.cli.bulk"
    }
    assert lazy and all(found.runs for found in lazy)


def test_a_cycle_is_found_and_type_checking_imports_close_none() -> None:
    loop = (
        Import("jobgate.wire.a", "jobgate.wire.b", 1, runs=True),
        Import("jobgate.wire.b", "jobgate.wire.c", 1, runs=True),
        Import("jobgate.wire.c", "jobgate.wire.a", 1, runs=True),
        Import("jobgate.wire.d", "jobgate.wire.a", 1, runs=True),
    )
    assert cycles(loop) == [frozenset({"jobgate.wire.a", "jobgate.wire.b", "jobgate.wire.c"})]
    typed = (*loop[:2], dataclasses.replace(loop[2], runs=False))
    assert cycles(typed) == []


def test_the_simulator_is_run_only_by_the_simulated_provider() -> None:
    real = Import("jobgate.providers.openai", "jobgate.simulator.model", 7, runs=True)
    assert layer_violations((real,)) == [
        "jobgate.providers.openai:7 imports jobgate.simulator.model: only "
        "['jobgate.providers.simulated'] may import 'simulator'"
    ]
