"""`python -m bench`'s options: which sections, backends and sizes to measure, and whether to
rewrite docs/benchmarks.md. The harness lives in this checkout's bench/, beside src/, and is not
shipped in the wheel: it is not a `jobgate` command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from bench import runner, sizes
from bench.runner import BACKENDS, SECTIONS


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
    default=True,
    help="Also measure PgQueuer and procrastinate (the default); at full size, rewrite "
    "docs/benchmarks.md and its chart.",
)
@click.option("--quick", is_flag=True, help="Small sizes: the same shape in a few minutes.")
@click.option(
    "--size",
    type=click.Choice(["full", "quick", "smoke"]),
    help="full (the documented table), quick (same as --quick), smoke (seconds).",
)
@click.option("--only", help=f"Comma-separated sections: {', '.join(SECTIONS)}.")
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
    side with its peers unless --jobgate-only. Needs PostgreSQL for the postgres backend."""
    name = size or ("quick" if quick else "full")
    if postgres:
        os.environ["JOBGATE_BENCH_POSTGRES"] = postgres
    options = runner.Options(
        sizes=sizes.BY_NAME[name],
        sections=_choices(only, SECTIONS, "--only"),
        backends=_choices(backends, BACKENDS, "--backends"),
        peers=everything,
        write_docs=docs if docs is not None else (everything and name == "full"),
        command=" ".join(["python -m bench", *sys.argv[1:]]),
    )
    if results_dir:
        options.results_dir = Path(results_dir)
    runner.run(options)
