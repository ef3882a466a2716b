"""The targets, judged against one run's cases, and the jobgate-to-peer ratios. The drain target
is parity with PgQueuer with every guarantee kept (the lease, the fenced finish, the stored result,
the per-transition log)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from bench.results import Case, best, select

DRAIN_RATIO = 1.0
SQLITE_DRAIN_PER_S = 10_000
SUBMIT_PER_S = 3_000
SUBMIT_P99_MS = 50.0
STATUS_P99_MS = 5.0
WAKE_P50_MS = 50.0
WAKE_P99_MS = 200.0
POLLERS = 10_000
POLLERS_MIB = 1024.0
INFLIGHT_CALLS = 50_000  # long calls held by one worker process
INFLIGHT_MIB = 1024.0
SUSTAINED = 0.98  # an offered rate counts as sustained when this share of it was answered


@dataclasses.dataclass
class Verdict:
    target: str
    goal: str
    measured: str
    met: bool | None  # None: not measured in this run
    score: float | None = None  # measured / goal, oriented so that >= 1 means met


@dataclasses.dataclass
class Ratio:
    label: str
    value: float | None  # jobgate / peer (higher is better for jobgate)
    detail: str


def _rate(case: Case | None) -> float | None:
    return None if case is None else case.metrics.get("jobs_per_s")


def drain_best(cases: Sequence[Case], system: str, backend: str = "postgres") -> Case | None:
    return best(select(cases, section="drain", system=system, backend=backend), "jobs_per_s")


def enqueue_best(cases: Sequence[Case], system: str, name: str) -> Case | None:
    return best(
        select(cases, section="enqueue", system=system, backend="postgres", name=name),
        "jobs_per_s",
    )


def ratios(cases: Sequence[Case]) -> list[Ratio]:
    rows = []
    for peer in ("pgqueuer", "procrastinate"):
        mine, theirs = drain_best(cases, "jobgate"), drain_best(cases, peer)
        rows.append(_ratio(f"drain vs {peer}", mine, theirs))
    for name in ("single", "batched"):
        for peer in ("pgqueuer", "procrastinate"):
            mine, theirs = enqueue_best(cases, "jobgate", name), enqueue_best(cases, peer, name)
            ratio = _ratio(f"{name} enqueue vs {peer}", mine, theirs)
            gap = select(cases, section="enqueue", system="jobgate", name=name)
            if mine is None and any(c.error for c in gap):
                ratio.detail = "n/a: jobgate has no batched path"
            rows.append(ratio)
    # The batched enqueue through POST /v1/jobs/bulk, beside the peer's.
    bulk = enqueue_best(cases, "jobgate", "bulk http")
    rows.append(
        _ratio(
            "bulk HTTP enqueue vs pgqueuer batched",
            bulk,
            enqueue_best(cases, "pgqueuer", "batched"),
        )
    )
    for op in ("submit", "status"):
        mine = http_best(cases, "jobgate", op)
        theirs = http_best(cases, "fastapi-asyncpg", op)
        rows.append(_http_ratio(f"HTTP {op} vs FastAPI+asyncpg", mine, theirs))
    return rows


def http_best(cases: Sequence[Case], system: str, op: str) -> Case | None:
    """The most requests per second `system` answered for `op` on PostgreSQL at an offered
    rate it served without errors (an overloaded rate's count includes timed-out requests);
    the best of any rate when every rate had errors."""
    chosen = select(cases, section="http", system=system, backend="postgres", name=op)
    clean = [c for c in chosen if not c.metrics.get("errors")]
    return best(clean, "achieved_per_s") or best(chosen, "achieved_per_s")


def _http_ratio(label: str, mine: Case | None, theirs: Case | None) -> Ratio:
    a = None if mine is None else mine.metrics.get("achieved_per_s")
    b = None if theirs is None else theirs.metrics.get("achieved_per_s")
    if a is None or b is None or b == 0:
        return Ratio(label, None, "not measured")
    p99 = [None if c is None else c.metrics.get("p99_ms") for c in (mine, theirs)]
    return Ratio(
        label, round(a / b, 3), f"{a:,.0f} vs {b:,.0f} req/s (p99 {p99[0]} vs {p99[1]} ms)"
    )


def _ratio(label: str, mine: Case | None, theirs: Case | None) -> Ratio:
    a, b = _rate(mine), _rate(theirs)
    if a is None or b is None or b == 0:
        return Ratio(label, None, "not measured" if a is None or b is None else "peer at 0")
    return Ratio(label, round(a / b, 3), f"{a:,.0f} vs {b:,.0f} jobs/s")


def _fmt(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.1f}{unit}"


def verdicts(cases: Sequence[Case]) -> list[Verdict]:
    out = []
    mine, pgq = drain_best(cases, "jobgate"), drain_best(cases, "pgqueuer")
    if _rate(mine) is not None and _rate(pgq):
        ratio = float(_rate(mine) or 0) / float(_rate(pgq) or 1)
        out.append(
            Verdict(
                "drain vs PgQueuer (PostgreSQL)",
                f">= {DRAIN_RATIO:g}x",
                f"{ratio:.2f}x ({_fmt(_rate(mine))} vs {_fmt(_rate(pgq))} jobs/s)",
                ratio >= DRAIN_RATIO,
                ratio / DRAIN_RATIO,
            )
        )
    else:
        out.append(Verdict("drain vs PgQueuer (PostgreSQL)", f">= {DRAIN_RATIO:g}x", "n/a", None))
    batched, pgq_batched = (
        enqueue_best(cases, "jobgate", "batched"),
        enqueue_best(cases, "pgqueuer", "batched"),
    )
    single = enqueue_best(cases, "jobgate", "single")
    if not _rate(pgq_batched):
        out.append(Verdict("batched enqueue vs PgQueuer", ">= 1x", "n/a", None))
    elif _rate(batched) is None:
        out.append(
            Verdict(
                "batched enqueue vs PgQueuer",
                ">= 1x",
                f"no batched path; single {_fmt(_rate(single))} vs PgQueuer batched "
                f"{_fmt(_rate(pgq_batched))} jobs/s",
                False,
                (_rate(single) or 0) / float(_rate(pgq_batched) or 1),
            )
        )
    else:
        out.append(_enqueue_verdict("batched enqueue vs PgQueuer", batched, pgq_batched))
    # Issue 15 item 6: the batched enqueue through `POST /v1/jobs/bulk` (one `jobgate api`, its
    # best number of callers) reaches PgQueuer's batched enqueue, as submit_many does.
    bulk = enqueue_best(cases, "jobgate", "bulk http")
    out.append(_enqueue_verdict("bulk HTTP enqueue vs PgQueuer batched", bulk, pgq_batched))
    lite = drain_best(cases, "jobgate", "sqlite")
    rate = _rate(lite)
    out.append(
        Verdict(
            "SQLite drain",
            f">= {SQLITE_DRAIN_PER_S:,} jobs/s",
            _fmt(rate, " jobs/s"),
            None if rate is None else rate >= SQLITE_DRAIN_PER_S,
            None if rate is None else rate / SQLITE_DRAIN_PER_S,
        )
    )
    for backend in ("sqlite", "postgres"):
        out.append(_submit_verdict(cases, backend))
        out.append(_status_verdict(cases, backend))
    for backend in ("sqlite", "postgres"):
        out.extend(_wake_verdicts(cases, backend))
        out.append(_memory_verdict(cases, backend))
    out.append(_inflight_verdict(cases))
    hooks = select(cases, section="webhooks")
    rate = next((c.metrics.get("deliveries_per_s") for c in hooks if c.error is None), None)
    out.append(
        Verdict("webhook deliveries", "measured", _fmt(rate, "/s"), None if rate is None else True)
    )
    return out


def drain_budget(cases: Sequence[Case], cores: int) -> str | None:
    """The drain target as a CPU budget: the drain is CPU-bound on a small machine (workers
    and PostgreSQL share its cores), so DRAIN_RATIO x PgQueuer's rate leaves each job at most
    cores / that rate of CPU in all. Quoted beside both systems' measured CPU per job, it says
    which side would have to shrink and by how much. None when the target is met, or either
    drain or its CPU is missing."""
    mine, pgq = drain_best(cases, "jobgate"), drain_best(cases, "pgqueuer")
    rate = _rate(pgq)
    if mine is None or pgq is None or not rate or cores < 1:
        return None
    spent, peer_spent = _cpu_per_job(mine), _cpu_per_job(pgq)
    if spent is None or peer_spent is None:
        return None
    (worker, database), (peer_worker, peer_database) = spent, peer_spent
    needed = DRAIN_RATIO * rate
    if float(_rate(mine) or 0) >= needed:
        return None
    budget = cores * 1000 / needed
    return (
        f"Drain as a CPU budget: {DRAIN_RATIO:g}x PgQueuer's {rate:,.0f} jobs/s is "
        f"{needed:,.0f} jobs/s, which on {cores} cores leaves each job at most {budget:.3f} ms "
        f"of CPU, workers and PostgreSQL together. jobgate's best drain used {worker:.3f} ms "
        f"(workers) + {database:.3f} ms (PostgreSQL) = {worker + database:.3f} ms per job; "
        f"PgQueuer's best {peer_worker:.3f} + {peer_database:.3f} = "
        f"{peer_worker + peer_database:.3f} ms."
    )


def _cpu_per_job(case: Case) -> tuple[float, float] | None:
    worker = case.metrics.get("worker_cpu_ms_per_job")
    database = case.metrics.get("postgres_cpu_ms_per_job")
    return None if worker is None or database is None else (worker, database)


def _enqueue_verdict(name: str, mine: Case | None, peer: Case | None) -> Verdict:
    """`mine` reaches `peer`'s jobs/s (>= 1x); n/a when either was not measured."""
    a, b = _rate(mine), _rate(peer)
    if a is None or not b:
        return Verdict(name, ">= 1x", "n/a", None)
    ratio = a / b
    return Verdict(
        name, ">= 1x", f"{ratio:.2f}x ({_fmt(a)} vs {_fmt(b)} jobs/s)", ratio >= 1, ratio
    )


def _http(cases: Sequence[Case], backend: str, op: str) -> list[Case]:
    """jobgate's own runs of `op` (the FastAPI + asyncpg anchor's runs are in the same section:
    they are compared in `ratios`, never judged as jobgate's)."""
    chosen = select(cases, section="http", system="jobgate", backend=backend, name=op)
    return [c for c in chosen if c.error is None]


def _floor(cases: Sequence[Case], op: str, rate: float | None) -> str:
    """The load generator's own p99 against the null server at `rate` (bench.http_bench.
    http_floor), as a note to a verdict measured at that rate: what no server can beat."""
    for case in select(cases, section="http", system="null-server", name=op):
        if case.error is None and case.metrics.get("offered_per_s") == rate:
            return f"the load generator's floor there: p99 {_fmt(case.metrics['p99_ms'], ' ms')}"
    return ""


def sustained(case: Case) -> bool:
    """Whether the server answered (nearly) everything offered, without errors."""
    offered = case.metrics.get("offered_per_s") or 0
    answered = case.metrics.get("achieved_per_s") or 0
    return answered >= SUSTAINED * offered and not case.metrics.get("errors")


def _submit_verdict(cases: Sequence[Case], backend: str) -> Verdict:
    name = f"HTTP submit ({backend})"
    goal = f">= {SUBMIT_PER_S:,}/s with p99 < {SUBMIT_P99_MS:g} ms"
    runs = _http(cases, backend, "submit")
    if not runs:
        return Verdict(name, goal, "n/a", None)
    good = [c for c in runs if sustained(c) and (c.metrics["p99_ms"] or 1e9) < SUBMIT_P99_MS]
    top = max(runs, key=lambda c: c.metrics.get("offered_per_s") or 0)
    best_good = max(good, key=lambda c: c.metrics["offered_per_s"] or 0) if good else None
    met: bool | None = (
        best_good is not None and (best_good.metrics["offered_per_s"] or 0) >= SUBMIT_PER_S
    )
    if not met and (top.metrics.get("offered_per_s") or 0) < SUBMIT_PER_S:
        met = None  # never offered the target rate: this run says nothing about it
    measured = (
        f"at {top.metrics['offered_per_s']:,.0f}/s offered: {top.metrics['achieved_per_s']:,.0f}/s "
        f"answered, p99 {_fmt(top.metrics['p99_ms'], ' ms')}"
    )
    if floor := _floor(cases, "submit", top.metrics["offered_per_s"]):
        measured += f" ({floor})"
    if best_good is not None and best_good is not top:
        measured += (
            f"; meets p99 < {SUBMIT_P99_MS:g} ms up to {best_good.metrics['offered_per_s']:,.0f}/s"
        )
    capacity = max((c.metrics.get("achieved_per_s") or 0) for c in runs)
    return Verdict(name, goal, measured, met, capacity / SUBMIT_PER_S)


def _status_verdict(cases: Sequence[Case], backend: str) -> Verdict:
    """Judged at the highest offered rate the server sustained (the issue names no rate for
    status reads; a rate the server cannot keep up with measures its queue, not its reads)."""
    name = f"HTTP status p99 ({backend})"
    goal = f"< {STATUS_P99_MS:g} ms"
    runs = sorted(_http(cases, backend, "status"), key=lambda c: c.metrics["offered_per_s"] or 0)
    if not runs:
        return Verdict(name, goal, "n/a", None)
    kept = [c for c in runs if sustained(c)]
    if not kept:
        top = runs[-1]
        return Verdict(
            name, goal,
            f"no rate sustained; p99 {_fmt(top.metrics['p99_ms'], ' ms')} at "
            f"{top.metrics['offered_per_s']:,.0f}/s",
            False, 0.0,
        )  # fmt: skip
    top = kept[-1]
    p99 = top.metrics.get("p99_ms")
    measured = f"p99 {_fmt(p99, ' ms')} at {top.metrics['offered_per_s']:,.0f}/s (highest sustained"
    if floor := _floor(cases, "status", top.metrics["offered_per_s"]):
        measured += f"; {floor}"
    measured += ")"
    if kept[0] is not top:
        low = kept[0].metrics
        measured += f"; {_fmt(low['p99_ms'], ' ms')} at {low['offered_per_s']:,.0f}/s"
    met = p99 is not None and p99 < STATUS_P99_MS
    return Verdict(name, goal, measured, met, None if not p99 else STATUS_P99_MS / p99)


def _wake_verdicts(cases: Sequence[Case], backend: str) -> list[Verdict]:
    runs = [
        c
        for c in select(cases, section="longpoll", backend=backend, name="wake")
        if c.error is None
    ]
    names = (f"long-poll wake p50 ({backend})", f"long-poll wake p99 ({backend})")
    if not runs:
        return [
            Verdict(names[0], f"< {WAKE_P50_MS:g} ms", "n/a", None),
            Verdict(names[1], f"< {WAKE_P99_MS:g} ms", "n/a", None),
        ]
    run = runs[0]
    p50, p99 = run.metrics.get("p50_ms"), run.metrics.get("p99_ms")
    ok = not run.metrics.get("failed")

    def floor(value: float | None) -> float:
        return max(0.1, value or 0.0)  # a wake that overtakes the cancel scores as 0.1 ms

    return [
        Verdict(
            names[0],
            f"< {WAKE_P50_MS:g} ms",
            _fmt(p50, " ms"),
            p50 is not None and ok and p50 < WAKE_P50_MS,
            WAKE_P50_MS / floor(p50),
        ),
        Verdict(
            names[1],
            f"< {WAKE_P99_MS:g} ms",
            _fmt(p99, " ms"),
            p99 is not None and ok and p99 < WAKE_P99_MS,
            WAKE_P99_MS / floor(p99),
        ),
    ]


def _memory_verdict(cases: Sequence[Case], backend: str) -> Verdict:
    name = f"{POLLERS:,} long-pollers ({backend})"
    goal = f"< {POLLERS_MIB / 1024:g} GiB RSS"
    runs = [
        c
        for c in select(cases, section="longpoll", backend=backend, name="memory")
        if c.error is None
    ]
    if not runs:
        return Verdict(name, goal, "n/a", None)
    m = runs[0].metrics
    held = int(m.get("held") or 0)
    rss = float(m.get("rss_mib") or 0)
    broken = bool(m.get("errors") or m.get("answered_early"))
    trouble = ""
    if broken:
        trouble = (
            f"; but {int(m.get('answered_early') or 0):,} answered early and "
            f"{int(m.get('errors') or 0):,} failed ({runs[0].note or 'see the logs'})"
        )
    if held >= POLLERS:
        return Verdict(
            name,
            goal,
            f"{rss:,.0f} MiB with {held:,} parked polls{trouble}",
            rss < POLLERS_MIB and not broken,
            POLLERS_MIB / max(rss, 1),
        )
    per_poll_mib = float(m.get("kib_per_poll") or 0) / 1024
    projected = float(m.get("rss_idle_mib") or 0) + per_poll_mib * POLLERS
    return Verdict(
        name,
        goal,
        f"{rss:,.0f} MiB with {held:,} polls; projected {projected:,.0f} MiB at {POLLERS:,}",
        None,
        POLLERS_MIB / max(projected, 1),
    )


def _inflight_verdict(cases: Sequence[Case]) -> Verdict:
    """The largest PostgreSQL in-flight run; below the goal's size, projected from its
    memory per call."""
    name = f"{INFLIGHT_CALLS:,} calls in flight, one worker (postgres)"
    goal = f"< {INFLIGHT_MIB / 1024:g} GiB RSS"
    runs = [c for c in select(cases, section="inflight", backend="postgres") if c.error is None]
    if not runs:
        return Verdict(name, goal, "n/a", None)
    largest = max(runs, key=lambda c: float(c.metrics.get("calls") or 0))
    m = largest.metrics
    calls = int(m.get("calls") or 0)
    rss = float(m.get("rss_mib") or 0)
    if calls >= INFLIGHT_CALLS:
        return Verdict(
            name, goal, f"{rss:,.0f} MiB with {calls:,} calls", rss < INFLIGHT_MIB,
            INFLIGHT_MIB / max(rss, 1),
        )  # fmt: skip
    projected = (
        float(m.get("rss_idle_mib") or 0)
        + float(m.get("kib_per_call") or 0) / 1024 * INFLIGHT_CALLS
    )
    return Verdict(
        name, goal,
        f"{rss:,.0f} MiB with {calls:,} calls; projected {projected:,.0f} MiB at "
        f"{INFLIGHT_CALLS:,} (not run)",
        None, INFLIGHT_MIB / max(projected, 1),
    )  # fmt: skip
