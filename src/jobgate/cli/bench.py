"""`jobgate bench`: run the benchmark harness of a source checkout (it lives in `bench/`, next
to `src/`, and is not shipped in the wheel; its peers are the `bench` extra)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import click

import jobgate

_SECTIONS = ("drain", "enqueue", "http", "longpoll", "inflight", "webhooks")
_BACKENDS = ("sqlite", "postgres")


def _checkouts() -> list[Path]:
    """Where a `bench/` directory may be: the working directory and its parents, then the
    checkout this jobgate was installed from (editable installs)."""
    here = Path.cwd()
    places = [here, *here.parents]
    package = Path(jobgate.__file__).resolve().parent  # <checkout>/src/jobgate
    places += [package.parent.parent]
    return places


def _harness() -> ModuleType:
    try:
        return importlib.import_module("bench.runner")
    except ModuleNotFoundError as exc:
        if exc.name not in ("bench", "bench.runner"):
            raise _missing_dependency(exc) from None
    for place in _checkouts():
        if (place / "bench" / "runner.py").is_file():
            sys.path.insert(0, str(place))
            try:
                return importlib.import_module("bench.runner")
            except ModuleNotFoundError as exc:
                raise _missing_dependency(exc) from None
    raise click.ClickException(
        "the benchmark harness is not here: run `jobgate bench` (or `python -m bench`) from a "
        "jobgate source checkout, whose bench/ directory holds it"
    )


def _missing_dependency(exc: ModuleNotFoundError) -> click.ClickException:
    return click.ClickException(
        f"the benchmarks need {exc.name!r}: install them with pip install -e '.[bench]'"
    )


def _choices(value: str | None, allowed: tuple[str, ...], option: str) -> tuple[str, ...]:
    if value is None:
        return allowed
    chosen = tuple(part.strip() for part in value.split(",") if part.strip())
    for part in chosen:
        if part not in allowed:
            raise click.BadParameter(
                f"{part!r} is not one of {', '.join(allowed)}", param_hint=option
            )
    return chosen


@click.command()
@click.option(
    "--all/--jobgate-only",
    "everything",
    default=False,
    help="Also measure PgQueuer and procrastinate; at full size, rewrite docs/benchmarks.md "
    "and its chart. `python -m bench` means --all.",
)
@click.option("--quick", is_flag=True, help="Small sizes: the same shape in a few minutes.")
@click.option(
    "--size",
    type=click.Choice(["full", "quick", "smoke"]),
    help="full (the documented table), quick (same as --quick), smoke (seconds).",
)
@click.option("--only", help=f"Comma-separated sections: {', '.join(_SECTIONS)}.")
@click.option("--backends", help="Comma-separated: sqlite, postgres (default both).")
@click.option(
    "--postgres",
    help="Admin DSN of the PostgreSQL server to create throwaway databases on "
    "(JOBGATE_BENCH_POSTGRES; default postgresql://postgres@127.0.0.1:5432/postgres).",
)
@click.option("--results-dir", type=click.Path(file_okay=False), help="Default: bench/results.")
@click.option(
    "--docs/--no-docs",
    default=None,
    help="Write docs/benchmarks.md and its chart (default: only with --all at full size).",
)
def bench(
    everything: bool,
    quick: bool,
    size: str | None,
    only: str | None,
    backends: str | None,
    postgres: str | None,
    results_dir: str | None,
    docs: bool | None,
) -> None:
    """Benchmark jobgate (drain, enqueue, HTTP, long polling, long calls in flight), side by
    side with its peers with --all. Needs a source checkout and PostgreSQL for the postgres
    backend."""
    harness = _harness()
    sizes_module = importlib.import_module("bench.sizes")
    name = size or ("quick" if quick else "full")
    if postgres:
        os.environ["JOBGATE_BENCH_POSTGRES"] = postgres
    options = harness.Options(
        sizes=sizes_module.BY_NAME[name],
        sections=_choices(only, _SECTIONS, "--only"),
        backends=_choices(backends, _BACKENDS, "--backends"),
        peers=everything,
        write_docs=docs if docs is not None else (everything and name == "full"),
        command=" ".join(["jobgate bench", *sys.argv[2:]]) if _invoked_as_cli() else _module_cmd(),
    )
    if results_dir:
        options.results_dir = Path(results_dir)
    harness.run(options)


def _invoked_as_cli() -> bool:
    return len(sys.argv) > 1 and sys.argv[1] == "bench"


def _module_cmd() -> str:
    return " ".join(["python -m bench", *sys.argv[1:]])


COMMANDS = (bench,)
