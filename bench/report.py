"""Turn a run's results into a markdown report (docs/benchmarks.md) and a ratios chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import targets
from bench.results import Case, select

MISSES = Path(__file__).with_name("misses.md")  # why a missed target is missed
METHOD = Path(__file__).with_name("method.md")  # how each figure is taken
# The last on-demand run of bench/backlog.py (status reads behind 1,000 to 1,000,000 queued
# jobs), kept as it wrote it: its own date and command, not this run's.
BACKLOG = Path(__file__).with_name("backlog.md")
# The last full run of the history section (bench/history.py), written by that run.
HISTORY = Path(__file__).with_name("history.md")
# What the latest documented run shows. Its first line names that run: a page regenerated from
# another run's results says the analysis is still to write rather than show one that fits
# other figures.
ANALYSIS = Path(__file__).with_name("analysis.md")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _config(case: Case) -> str:
    return ", ".join(f"{k} {v}" for k, v in case.config.items())


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _mark(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[met]


def summary_lines(cases: Sequence[Case]) -> list[str]:
    rows = [(v.target, v.goal, v.measured, _mark(v.met)) for v in targets.verdicts(cases)]
    return _table(("target", "goal", "measured", ""), rows)


def miss_lines(cases: Sequence[Case], cores: int | None) -> list[str]:
    """Under the targets table: the drain target as this run's CPU budget, then why each kind
    of miss happens (bench/misses.md), whenever a target is missed."""
    if all(v.met is not False for v in targets.verdicts(cases)):
        return []
    out = []
    budget = targets.drain_budget(cases, cores) if cores else None
    if budget is not None:
        out += [budget, ""]
    if MISSES.exists():
        out += [MISSES.read_text().rstrip(), ""]
    return out


def analysis_lines(run_date: str) -> list[str]:
    """The analysis written for this run (bench/analysis.md, whose first line names its run),
    or a line saying there is none yet."""
    text = ANALYSIS.read_text() if ANALYSIS.exists() else ""
    first, _, rest = text.partition("\n")
    if f"the run of {run_date}:" in first:
        return [rest.strip(), ""]
    return [
        "## What this run shows",
        "",
        "Not analysed yet: bench/analysis.md analyses another run (its first line names it).",
        "",
    ]


def ratio_lines(cases: Sequence[Case]) -> list[str]:
    rows = [
        (r.label, "-" if r.value is None else f"{r.value:.2f}x", r.detail)
        for r in targets.ratios(cases)
    ]
    return _table(("jobgate ÷ peer", "ratio", "figures"), rows)


def _section_rows(cases: Sequence[Case], section: str, metrics: Sequence[str]) -> list[list[Any]]:
    rows = []
    for case in select(cases, section=section):
        if case.error is not None:
            rows.append(
                [
                    case.system,
                    case.backend,
                    case.name,
                    _config(case),
                    *(["-"] * (len(metrics) - 1)),
                    f"not measured: {case.error}",
                ]
            )
            continue
        cells: list[Any] = [case.system, case.backend, case.name, _config(case)]
        cells += [case.metrics.get(m) for m in metrics[:-1]]
        rows.append([*cells, case.note or ""])
    return rows


SECTIONS: dict[str, tuple[str, Sequence[str], Sequence[str]]] = {
    "drain": (
        "Drain: queued no-op jobs to all finished",
        (
            "jobs",
            "seconds",
            "jobs_per_s",
            "worker_cpu_ms_per_job",
            "postgres_cpu_ms_per_job",
            "jobs_per_claim",
            "events_per_job",
            "note",
        ),
        (
            "jobs",
            "seconds",
            "jobs/s",
            "worker CPU ms/job",
            "PostgreSQL CPU ms/job",
            "jobs/claim",
            "events/job",
            "note",
        ),
    ),
    "enqueue": (
        "Enqueue",
        ("jobs", "seconds", "jobs_per_s", "note"),
        ("jobs", "seconds", "jobs/s", "note"),
    ),
    "http": (
        "HTTP under open-loop load",
        (
            "offered_per_s",
            "achieved_per_s",
            "p50_ms",
            "p99_ms",
            "max_ms",
            "errors",
            "server_cpu_ms_per_request",
            "postgres_cpu_ms_per_request",
            "note",
        ),
        (
            "offered/s",
            "answered/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors",
            "server CPU ms/req",
            "PostgreSQL CPU ms/req",
            "note",
        ),
    ),
    "longpoll": (
        "Long polling",
        (
            "p50_ms",
            "p99_ms",
            "from_cancel_sent_p99_ms",
            "held",
            "rss_idle_mib",
            "rss_mib",
            "kib_per_poll",
            "cpu_percent_holding",
            "note",
        ),
        (
            "wake p50 ms",
            "wake p99 ms",
            "p99 from cancel sent",
            "parked polls",
            "idle RSS MiB",
            "RSS MiB",
            "KiB/poll",
            "CPU % parked",
            "note",
        ),
    ),
    "inflight": (
        "Long calls in flight (one worker process)",
        (
            "ramp_s",
            "rss_idle_mib",
            "rss_mib",
            "kib_per_call",
            "worker_cpu_percent",
            "heartbeats_per_s",
            "rows_per_heartbeat",
            "heartbeat_server_ms",
            "heartbeat_timed_ms",
            "db_commits_per_s",
            "postgres_cpu_percent",
            "exactly_once",
            "note",
        ),
        (
            "all running after s",
            "idle RSS MiB",
            "RSS MiB",
            "KiB/call",
            "worker CPU % waiting",
            "heartbeats/s",
            "rows per heartbeat",
            "heartbeat ms (server)",
            "heartbeat ms (timed)",
            "DB commits/s (approx.)",
            "PostgreSQL CPU %",
            "finished exactly once",
            "note",
        ),
    ),
    "webhooks": (
        "Webhook deliveries",
        ("deliveries", "seconds", "deliveries_per_s", "p50_ms", "p99_ms", "note"),
        ("deliveries", "seconds", "deliveries/s", "p50 ms", "p99 ms", "note"),
    ),
}


def _probe_lines(start: dict[str, Any] | None, end: dict[str, Any] | None) -> list[str]:
    """How fast the host was (bench.machine.probes), at the start and the end of the run: to
    compare this run's absolute figures with another's, compare these first."""
    if not start:
        return []

    def probe(facts: dict[str, Any]) -> str:
        fsync = facts["fsync"]
        return (
            f"a fixed Python loop {facts['python_loop_s']} s, fsync of 4 KiB p50 "
            f"{fsync['p50_ms']} ms / p90 {fsync['p90_ms']} ms"
        )

    at_end = f"; at the end: {probe(end)}" if end else ""
    return [
        "",
        f"Host speed at the start: {probe(start)}{at_end} (bench/machine.py: compare these "
        "and the CPU model under Machine before comparing two runs' absolute figures).",
    ]


def markdown(results: dict[str, Any], chart_name: str | None) -> str:
    cases = [Case(**c) for c in results["cases"]]
    run, machine, postgres = results["run"], results["machine"], results.get("postgres") or {}
    out = [
        "# Benchmarks",
        "",
        f"<!-- Generated by `{run['command']}` on {run['date']}; edit bench/ (method.md, misses.md",
        "and analysis.md for the text), not this file. -->",
        "",
        f"Measured on {run['date']} with `{run['command']}` ({run['size']} size, "
        f"{run['seconds'] / 60:.0f} min). The machine is shared and noisy (load average "
        f"{machine.get('load_average_at_start')} at the start, {run.get('load_average_at_end')} "
        "at the end), so absolute numbers move from run to run; the ratios against PgQueuer and "
        "procrastinate, measured in the same run on the same PostgreSQL, are the figures to "
        "compare. Durability stays on everywhere: PostgreSQL `fsync` and `synchronous_commit`, "
        "SQLite `synchronous=FULL`, PgQueuer's default `durable` tables.",
        *_probe_lines(machine.get("probes_at_start"), run.get("probes_at_end")),
        "",
        "## Targets",
        "",
        *summary_lines(cases),
        "",
        *miss_lines(cases, machine.get("cpus_usable")),
        "## Ratios",
        "",
        *ratio_lines(cases),
        "",
    ]
    if chart_name:
        out += [f"![jobgate ÷ peers and measured ÷ target]({chart_name})", ""]
    for section, (title, metrics, headers) in SECTIONS.items():
        rows = _section_rows(cases, section, metrics)
        if not rows:
            continue
        out += [
            f"## {title}",
            "",
            *_table(("system", "backend", "what", "config", *headers), rows),
            "",
        ]
    if BACKLOG.exists():
        out += [BACKLOG.read_text().rstrip(), ""]
    if HISTORY.exists():
        out += [HISTORY.read_text().rstrip(), ""]
    out += [
        "## Machine",
        "",
        f"- CPU: {machine['cpu']}, {machine['cpus']} logical CPUs "
        f"({machine['cpus_usable']} usable), {machine['memory_gib']} GiB RAM, {machine['os']}",
        f"- Python {machine['python']}; "
        + ", ".join(f"{k} {v}" for k, v in machine["packages"].items() if v),
        f"- PostgreSQL {postgres.get('version', 'n/a')} on the same host (loopback): "
        + ", ".join(f"{k}={v}" for k, v in postgres.items() if k != "version"),
        "",
        "## Reproduce",
        "",
        "```sh",
        "pip install -e '.[bench]'",
        "python -m bench            # everything, full size; rewrites this file and the chart",
        "python -m bench --quick    # the same shape, small sizes, results only",
        "python -m bench --jobgate-only --only drain --backends sqlite   # one section",
        "python -m bench.responses_http --backend postgres  # on demand: the Responses routes' CPU",
        "python -m bench.backlog --docs    # on demand: status reads behind a backlog",
        "python -m bench --jobgate-only --only history --backends postgres  # 5 M jobs of "
        "history against none (~15 min, ~9 GiB); updates its section of this file",
        "```",
        "",
        "Raw results (every configuration, every child process's log) are written to "
        "`bench/results/` (not committed).",
        "",
    ]
    out += [METHOD.read_text().rstrip(), "", *analysis_lines(run["date"])]
    return "\n".join(out)


HISTORY_TITLE = "## A history of millions of jobs against none"
HISTORY_BAR = 1.2  # "unchanged": within this factor (the bar for status reads)


def _ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return None
    return float(a) / float(b)


def _verdict(ratio: float | None, *, higher_is_better: bool = False) -> str:
    if ratio is None:
        return "not measured"
    worse = 1 / ratio if higher_is_better and ratio else ratio
    return "met" if worse <= HISTORY_BAR else "**missed**"


def history_lines(cases: Sequence[Case], run: dict[str, Any]) -> list[str]:
    """The history section's table: each measurement on the empty database and on the
    history's, their ratio and whether it stays within HISTORY_BAR."""
    found = {c.name: c for c in select(cases, section="history")}
    empty, full = found.get("empty"), found.get("history")
    if empty is None or full is None or empty.error or full.error:
        failed = next((c for c in (empty, full) if c is not None and c.error), None)
        why = failed.error if failed else "not run"
        return [HISTORY_TITLE, "", f"Not measured: {why}", ""]
    e, h = empty.metrics, full.metrics
    load: dict[str, Any] = h.get("load") or {}  # type: ignore[assignment]
    rows_loaded: dict[str, int] = load.get("rows", {})
    backlog = int(full.config.get("backlog", 0))
    rate = full.config.get("status_rate")
    lines = [
        HISTORY_TITLE,
        "",
        f"Measured on {run['date']} with `{run['command']}` (bench/history.py), on the machine "
        "below, shared with other sessions' work: load average (1, 5, 15 min) "
        f"{h.get('load_average_start')} at the start of the section and "
        f"{h.get('load_average_end')} at its end, on 2 cores. The history: "
        + ", ".join(f"{n:,} rows of {t}" for t, n in rows_loaded.items())
        + f" over {full.config.get('days')} days of `job_created_at` (one partition a day), "
        f"loaded by COPY in {load.get('copy_s')} s ({load.get('load_s')} s with `VACUUM "
        f"ANALYZE`; {load.get('database_gib')} GiB). The same measurements ran first on an empty "
        f"database, then on the history's, in the same order. Status reads: `GET /v1/jobs/{{id}}`"
        f" of 1,000 queued jobs at {rate}/s open loop through one `jobgate api` process, with "
        f"those 1,000 queued, then behind {backlog - 1000:,} more queued jobs of the same tenant "
        "(COPY). Long-poll wake: cancel on one API process, poll answered on another "
        "(LISTEN/NOTIFY). The bar is the issue's: within "
        f"{HISTORY_BAR}x (for the drain, at least 1/{HISTORY_BAR} of the rate).",
        "",
        "| measurement | empty | history | history ÷ empty | within 1.2x |",
        "|---|---|---|---|---|",
    ]

    def row(label: str, key: str, *, higher: bool = False) -> None:
        ratio = _ratio(h.get(key), e.get(key))
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        lines.append(
            f"| {label} | {_cell(e.get(key))} | {_cell(h.get(key))} | {shown} | "
            f"{_verdict(ratio, higher_is_better=higher)} |"
        )

    row("claim of 10, p50 ms", "claim.p50_ms")
    row("claim of 10, p95 ms", "claim.p95_ms")
    row("drain jobs/s (2 workers x 64)", "drain.jobs_per_s", higher=True)
    row("drain worker CPU ms/job", "drain.worker_cpu_ms_per_job")
    row("drain PostgreSQL CPU ms/job", "drain.postgres_cpu_ms_per_job")
    row("status p50 ms, 1,000 queued", "status_small.p50_ms")
    row("status p99 ms, 1,000 queued", "status_small.p99_ms")
    row(f"status p50 ms, {backlog:,} queued", "status_large.p50_ms")
    row(f"status p99 ms, {backlog:,} queued", "status_large.p99_ms")
    row("long-poll wake p50 ms, 1,000 queued", "wake_small.p50_ms")
    row("long-poll wake p99 ms, 1,000 queued", "wake_small.p99_ms")
    row(f"long-poll wake p99 ms, {backlog:,} queued", "wake_large.p99_ms")
    lines += [
        "",
        f"| status p99 at {backlog:,} queued ÷ at 1,000 | ratio | within 1.2x |",
        "|---|---|---|",
    ]
    for label, m in (("empty", e), ("history", h)):
        ratio = _ratio(m.get("status_large.p99_ms"), m.get("status_small.p99_ms"))
        shown = "-" if ratio is None else f"{ratio:.2f}x"
        lines.append(f"| {label} | {shown} | {_verdict(ratio)} |")
    lines += [
        "",
        f"Retention of the oldest day on the history (the reaper's sweep: "
        f"{_cell(h.get('retention.jobs_deleted'))} jobs deleted in batches of 500, then "
        f"{_cell(h.get('retention.partitions_dropped'))} partitions dropped, the day's one of "
        "each history table): "
        f"{_cell(h.get('retention.sweep_s'))} s in all, of which the drop of the day "
        f"{_cell(h.get('retention.drop_s'))} s.",
        "",
        "How to read it: each figure is one measurement on a shared 2-core machine, the empty "
        "database's minutes and the history's apart, so the machine's other work weighs on "
        "each alike only by chance. A status read through HTTP costs the API process and "
        "PostgreSQL about half a millisecond of CPU each (the table's runs), so at 500 reads/s "
        "its p50 and p99 are those of the CPU left over, not of the backlog: the database read "
        "alone, timed in rounds across the sizes, is under *Status reads behind a backlog*.",
        "",
    ]
    return lines


def chart_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def chart(results: dict[str, Any], path: Path) -> None:
    """Two panels: jobgate ÷ each peer, and measured ÷ target (needs matplotlib, in the
    `bench` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [Case(**c) for c in results["cases"]]
    peer_ratios = targets.ratios(cases)
    goals = [v for v in targets.verdicts(cases) if v.score is not None]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 6.5))

    labels = [r.label for r in peer_ratios]
    values = [r.value or 0.0 for r in peer_ratios]
    colors = ["#2b8a3e" if (r.value or 0) >= 1 else "#c92a2a" for r in peer_ratios]
    left.barh(labels, [max(v, 0.011) if v else 0.0 for v in values], color=colors)
    left.axvline(1.0, color="black", linewidth=1)
    left.axvline(
        targets.DRAIN_RATIO,
        color="#1971c2",
        linestyle="--",
        linewidth=1,
        label=f"drain target {targets.DRAIN_RATIO:g}x PgQueuer",
    )
    for index, ratio in enumerate(peer_ratios):
        text = ratio.detail if ratio.value is None else f"{ratio.value:.2f}x"
        left.text(ratio.value or 0.011, index, " " + text, va="center", fontsize=8)
    left.set_xscale("log")
    left.set_xlim(0.01, max([*values, 2.0]) * 4)
    left.set_title("jobgate ÷ peer, same run (higher is better)")
    left.invert_yaxis()
    left.legend(loc="lower right", fontsize=8)

    glabels = [v.target for v in goals]
    gvalues = [max(v.score or 0.0, 1e-3) for v in goals]
    gcolors = [
        "#2b8a3e" if (v.met if v.met is not None else (v.score or 0) >= 1) else "#c92a2a"
        for v in goals
    ]
    right.barh(glabels, gvalues, color=gcolors)
    right.axvline(1.0, color="black", linewidth=1)
    right.set_xscale("log")
    right.set_title("measured ÷ target (>= 1 meets the target)")
    right.invert_yaxis()
    for index, value in enumerate(gvalues):
        right.text(value, index, f" {value:.2g}", va="center", fontsize=8)

    fig.suptitle(f"jobgate benchmarks, {results['run']['date']} ({results['run']['size']})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    """`python -m bench.report [RESULTS_JSON]`: rebuild docs/benchmarks.md and its chart from
    a saved run (default bench/results/latest.json), e.g. after editing bench/analysis.md."""
    import json
    import sys

    root = Path(__file__).resolve().parent.parent
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "bench" / "results" / "latest.json"
    results = json.loads(source.read_text())
    chart_name = "benchmarks-ratios.png"
    (root / "docs" / "benchmarks.md").write_text(markdown(results, chart_name))
    if chart_available():
        chart(results, root / "docs" / chart_name)
        print(f"docs/benchmarks.md and docs/{chart_name} rebuilt from {source}")
    else:  # the chart of the same results stays; redrawing it needs the `bench` extra
        print(f"docs/benchmarks.md rebuilt from {source}; docs/{chart_name} kept (no matplotlib)")


if __name__ == "__main__":
    main()
