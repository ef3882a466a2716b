"""One benchmark run: every selected section against one PostgreSQL server, then the results
file, and (at full size with peers) docs/benchmarks.md and its chart.

Webhook deliveries are measured by `bench/webhooks.py` when the outbound-webhooks feature
provides it: `async def measure(ctx: RunContext) -> list[Case]`, returning cases with section
"webhooks" and metrics `deliveries`, `seconds`, `deliveries_per_s` (optionally `p50_ms`,
`p99_ms`). Without that module the report keeps the row, marked not measured.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import shutil
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench import jobgate_drain, jobgate_enqueue, machine, pg, procs, report
from bench.context import RunContext
from bench.results import Case
from bench.sizes import Sizes

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("drain", "enqueue", "http", "longpoll", "inflight", "webhooks", "history")
BACKENDS = ("sqlite", "postgres")
CHART = "benchmarks-ratios.png"


@dataclasses.dataclass
class Options:
    sizes: Sizes
    sections: tuple[str, ...] = SECTIONS
    backends: tuple[str, ...] = BACKENDS
    peers: bool = True
    write_docs: bool = False
    results_dir: Path = ROOT / "bench" / "results"
    docs_dir: Path = ROOT / "docs"
    command: str = "python -m bench"


async def _guard(
    ctx: RunContext,
    cases: list[Case],
    what: str,
    work: Callable[[], Awaitable[list[Case]]],
    on_error: Case,
) -> None:
    """Run one measurement; a failure becomes a case with the error, never a dead run."""
    ctx.say(f"{what} ...")
    try:
        measured = await work()
    except Exception as exc:
        ctx.say(f"{what} FAILED: {type(exc).__name__}: {exc}")
        ctx.log_dir.mkdir(parents=True, exist_ok=True)
        with (ctx.log_dir / "errors.log").open("a") as errors:
            errors.write(f"== {what}\n{traceback.format_exc()}\n")
        on_error.error = f"{type(exc).__name__}: {exc}"
        cases.append(on_error)
        return
    for case in measured:
        ctx.say(f"  {case.label}: {case.error or case.metrics}")
    cases.extend(measured)


def _one(work: Callable[[], Awaitable[Case]]) -> Callable[[], Awaitable[list[Case]]]:
    async def one() -> list[Case]:
        return [await work()]

    return one


async def _drain(ctx: RunContext, options: Options, cases: list[Case]) -> None:
    sizes = ctx.sizes
    jobs = sizes.drain_jobs
    if "postgres" in options.backends:
        runs: list[tuple[str, Callable[[], Awaitable[Case]], Case]] = []
        template = await jobgate_drain.filled_template(ctx, jobs)
        try:
            for p, c in sizes.jobgate_drain_configs:
                config = {"processes": p, "concurrency": c}
                work = partial(
                    jobgate_drain.drain_postgres, ctx, template, processes=p, concurrency=c,
                    jobs=jobs,
                )  # fmt: skip
                runs.append(
                    (
                        f"drain jobgate postgres {config}",
                        work,
                        Case("drain", "jobgate", "postgres", "drain", config, {}),
                    )
                )
            if options.peers:
                from bench.peers import pgqueuer_peer

                for index, (p, b) in enumerate(sizes.pgqueuer_drain_configs):
                    config = {"processes": p, "batch_size": b}
                    work = partial(pgqueuer_peer.drain, ctx, processes=p, batch_size=b, jobs=jobs)
                    # Interleave with jobgate's runs so that a noisy minute hurts both alike.
                    runs.insert(min(2 * index + 1, len(runs)), (
                        f"drain pgqueuer {config}", work,
                        Case("drain", "pgqueuer", "postgres", "drain", config, {}),
                    ))  # fmt: skip
            for what, work, placeholder in runs:
                await _guard(ctx, cases, what, _one(work), placeholder)
        finally:
            await pg.drop(template)
        if options.peers:
            from bench.peers import procrastinate_peer

            for p, c in sizes.procrastinate_drain_configs:
                config = {"processes": p, "concurrency": c}
                work = partial(procrastinate_peer.drain, ctx, processes=p, concurrency=c, jobs=jobs)
                await _guard(
                    ctx,
                    cases,
                    f"drain procrastinate {config}",
                    _one(work),
                    Case("drain", "procrastinate", "postgres", "drain", config, {}),
                )
    if "sqlite" in options.backends:
        for c in sorted({c for _, c in sizes.jobgate_drain_configs}):
            config = {"processes": 1, "concurrency": c}
            work = partial(jobgate_drain.drain_sqlite, ctx, concurrency=c, jobs=jobs)
            await _guard(
                ctx,
                cases,
                f"drain jobgate sqlite {config}",
                _one(work),
                Case("drain", "jobgate", "sqlite", "drain", config, {}),
            )


async def _enqueue(ctx: RunContext, options: Options, cases: list[Case]) -> None:
    sizes = ctx.sizes
    if "postgres" in options.backends:
        await _guard(
            ctx,
            cases,
            "enqueue jobgate postgres",
            partial(jobgate_enqueue.enqueue_postgres, ctx),
            Case("enqueue", "jobgate", "postgres", "single", {}, {}),
        )
        if options.peers:
            from bench.peers import pgqueuer_peer, procrastinate_peer

            for peer, measure in (
                ("pgqueuer", pgqueuer_peer.enqueue),
                ("procrastinate", procrastinate_peer.enqueue),
            ):
                work = partial(
                    measure,
                    ctx,
                    jobs=sizes.enqueue_jobs,
                    concurrencies=sizes.enqueue_concurrency,
                    batch=sizes.enqueue_batch,
                    batched_jobs=sizes.enqueue_batched_jobs,
                )
                await _guard(
                    ctx,
                    cases,
                    f"enqueue {peer}",
                    work,
                    Case("enqueue", peer, "postgres", "single", {}, {}),
                )
    if "sqlite" in options.backends:
        await _guard(
            ctx,
            cases,
            "enqueue jobgate sqlite",
            partial(jobgate_enqueue.enqueue_sqlite, ctx),
            Case("enqueue", "jobgate", "sqlite", "single", {}, {}),
        )


async def _http(ctx: RunContext, options: Options, cases: list[Case]) -> None:
    from bench import http_bench

    for backend in options.backends:
        measure = http_bench.http_sqlite if backend == "sqlite" else http_bench.http_postgres
        await _guard(
            ctx,
            cases,
            f"http {backend}",
            partial(measure, ctx),
            Case("http", "jobgate", backend, "submit", {}, {}),
        )
    if "postgres" in options.backends:
        await _guard(
            ctx,
            cases,
            "http anchor",
            partial(http_bench.http_anchor, ctx),
            Case("http", http_bench.ANCHOR, "postgres", "submit", {}, {}),
        )
    await _guard(
        ctx,
        cases,
        "http floor",
        partial(http_bench.http_floor, ctx),
        Case("http", http_bench.FLOOR, "none", "submit", {}, {}),
    )


async def _longpoll(ctx: RunContext, options: Options, cases: list[Case]) -> None:
    from bench import longpoll

    for backend in options.backends:
        measure = longpoll.longpoll_sqlite if backend == "sqlite" else longpoll.longpoll_postgres
        await _guard(
            ctx,
            cases,
            f"long poll {backend}",
            partial(measure, ctx),
            Case("longpoll", "jobgate", backend, "wake", {}, {}),
        )


async def _inflight(ctx: RunContext, options: Options, cases: list[Case]) -> None:
    from bench import inflight

    for backend in options.backends:
        measure = inflight.inflight_sqlite if backend == "sqlite" else inflight.inflight_postgres
        await _guard(
            ctx,
            cases,
            f"in flight {backend}",
            partial(measure, ctx),
            Case("inflight", "jobgate", backend, "hold", {}, {}),
        )


async def _webhooks(ctx: RunContext, options: Options, cases: list[Case]) -> None:
    try:
        module = importlib.import_module("bench.webhooks")
    except ModuleNotFoundError as exc:
        if exc.name != "bench.webhooks":
            raise
        cases.append(Case(
            "webhooks", "jobgate", "-", "deliveries", {}, {},
            error="bench/webhooks.py is not in this build (outbound webhooks not merged yet)",
        ))  # fmt: skip
        return
    await _guard(
        ctx,
        cases,
        "webhooks",
        partial(module.measure, ctx),
        Case("webhooks", "jobgate", "-", "deliveries", {}, {}),
    )


async def _history(ctx: RunContext, options: Options, cases: list[Case]) -> None:
    from bench import history

    if "postgres" not in options.backends:
        return
    await _guard(
        ctx,
        cases,
        "history",
        partial(history.measure, ctx),
        Case("history", "jobgate", "postgres", "history", {}, {}),
    )


STEPS = {
    "drain": _drain,
    "enqueue": _enqueue,
    "http": _http,
    "longpoll": _longpoll,
    "inflight": _inflight,
    "webhooks": _webhooks,
    "history": _history,
}


async def _run(options: Options, run_dir: Path) -> dict[str, Any]:
    sizes = options.sizes
    procs.raise_file_limit(2 * sizes.longpoll_clients + 4096)
    scratch = Path(tempfile.mkdtemp(prefix="jobgate-bench-"))
    ctx = RunContext(
        sizes, scratch, run_dir / "logs", "postgres" in options.backends, options.peers
    )
    started = time.monotonic()
    results: dict[str, Any] = {
        "run": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "size": sizes.name,
            "command": options.command,
            "sections": list(options.sections),
            "backends": list(options.backends),
            "peers": options.peers,
        },
        "machine": {**machine.describe(), "probes_at_start": machine.probes(run_dir)},
        "cases": [],
    }
    if ctx.postgres:
        if not await pg.available():
            raise SystemExit(
                f"PostgreSQL is not reachable at {pg.admin_dsn()} "
                "(set JOBGATE_BENCH_POSTGRES or pass --postgres)"
            )
        results["postgres"] = await pg.server_facts()
    cases: list[Case] = []
    try:
        for section in SECTIONS:
            if section in options.sections:
                await STEPS[section](ctx, options, cases)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["cases"] = [dataclasses.asdict(c) for c in cases]
    results["run"]["seconds"] = round(time.monotonic() - started, 1)
    results["run"]["load_average_at_end"] = machine.load_average()
    results["run"]["probes_at_end"] = machine.probes(run_dir)
    return results


def _history_docs(options: Options, results: dict[str, Any], cases: list[Case]) -> None:
    """The history section's table: printed; at full size, measured without error, kept in
    bench/history.md (which the report includes) and put into docs/benchmarks.md in place."""
    from bench import backlog

    text = "\n".join(report.history_lines(cases, results["run"]))
    print(text)
    measured = all(c.error is None for c in report.select(cases, section="history"))
    if options.sizes.name != "full" or not measured:
        return
    report.HISTORY.write_text(text)
    doc = options.docs_dir / "benchmarks.md"
    if doc.exists() and not options.write_docs:
        backlog.splice(doc, text, report.HISTORY_TITLE)


def run(options: Options) -> dict[str, Any]:
    """Run, write the results (and docs when asked), print the summary; return the results."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = options.results_dir / f"{stamp}-{options.sizes.name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    if options.write_docs and not report.chart_available():
        raise SystemExit("writing the docs needs matplotlib: pip install -e '.[bench]'")
    results = asyncio.run(_run(options, run_dir))
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    (options.results_dir / "latest.json").write_text(json.dumps(results, indent=2, default=str))
    chart_path = run_dir / CHART
    drawn = report.chart_available()
    if drawn:
        report.chart(results, chart_path)
    text = report.markdown(results, CHART if drawn else None)
    (run_dir / "benchmarks.md").write_text(text)
    if options.write_docs:
        options.docs_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(chart_path, options.docs_dir / CHART)
        (options.docs_dir / "benchmarks.md").write_text(text)
    cases = [Case(**c) for c in results["cases"]]
    if report.select(cases, section="history"):
        _history_docs(options, results, cases)
    print("\n".join(report.summary_lines(cases)))
    print()
    print("\n".join(report.ratio_lines(cases)))
    print(f"\nresults: {run_dir}")
    if options.write_docs:
        print(f"docs: {options.docs_dir / 'benchmarks.md'}, {options.docs_dir / CHART}")
    return results
