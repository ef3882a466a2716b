"""bench.targets judges jobgate's own HTTP runs: the FastAPI + asyncpg anchor measured in the
same section is a peer for the ratios, not a run of jobgate's."""

from __future__ import annotations

from bench.results import Case
from bench.targets import verdicts


def http(system: str, op: str, offered: float, answered: float, p99_ms: float) -> Case:
    metrics: dict[str, float | None] = {
        "offered_per_s": offered,
        "achieved_per_s": answered,
        "p99_ms": p99_ms,
        "errors": 0,
    }
    return Case("http", system, "postgres", op, {"rate": offered}, metrics)


def verdict(cases: list[Case], name: str) -> tuple[str, bool | None]:
    (found,) = [v for v in verdicts(cases) if v.target == name]
    return found.measured, found.met


def test_status_is_judged_on_jobgates_runs_only() -> None:
    cases = [
        http("jobgate", "status", 2000, 2000, 3.0),
        http("jobgate", "status", 3000, 3000, 4.0),
        http("fastapi-asyncpg", "status", 3000, 3000, 31.3),
    ]
    measured, met = verdict(cases, "HTTP status p99 (postgres)")
    assert met is True, measured
    assert measured.startswith("p99 4.0 ms at 3,000/s")


def test_submit_is_judged_on_jobgates_runs_only() -> None:
    cases = [
        http("fastapi-asyncpg", "submit", 3000, 2473, 3567.2),
        http("jobgate", "submit", 3000, 3000, 40.0),
    ]
    measured, met = verdict(cases, "HTTP submit (postgres)")
    assert met is True, measured
    assert "p99 40.0 ms" in measured


def test_the_load_generators_floor_is_quoted_beside_the_verdict_never_judged() -> None:
    cases = [
        http("jobgate", "status", 3000, 3000, 12.0),
        http("jobgate", "submit", 3000, 3000, 80.0),
        http("null-server", "status", 3000, 3000, 2.5),
        http("null-server", "status", 2000, 2000, 1.5),
        http("null-server", "submit", 3000, 3000, 3.5),
    ]
    measured, met = verdict(cases, "HTTP status p99 (postgres)")
    assert met is False
    assert measured == (
        "p99 12.0 ms at 3,000/s (highest sustained; the load generator's floor there: p99 2.5 ms)"
    )
    measured, met = verdict(cases, "HTTP submit (postgres)")
    assert met is False
    assert "p99 80.0 ms (the load generator's floor there: p99 3.5 ms)" in measured


def enqueue(system: str, name: str, jobs_per_s: float) -> Case:
    return Case("enqueue", system, "postgres", name, {"batch": 500}, {"jobs_per_s": jobs_per_s})


def test_the_bulk_route_is_judged_against_pgqueuers_batched_enqueue() -> None:
    """Issue 15 item 6 is a target of its own: the bulk route's best number of callers against
    PgQueuer's best batched enqueue, whatever the in-process batched enqueue reached."""
    cases = [
        enqueue("pgqueuer", "batched", 60_000),
        enqueue("pgqueuer", "batched", 50_000),
        enqueue("jobgate", "batched", 70_000),
        enqueue("jobgate", "bulk http", 40_000),
        enqueue("jobgate", "bulk http", 45_000),
        enqueue("jobgate", "bulk http keyed", 90_000),  # another row: never the bulk route's
    ]
    assert verdict(cases, "batched enqueue vs PgQueuer") == (
        "1.17x (70,000.0 vs 60,000.0 jobs/s)",
        True,
    )
    measured, met = verdict(cases, "bulk HTTP enqueue vs PgQueuer batched")
    assert (measured, met) == ("0.75x (45,000.0 vs 60,000.0 jobs/s)", False)
    cases.append(enqueue("jobgate", "bulk http", 61_000))
    assert verdict(cases, "bulk HTTP enqueue vs PgQueuer batched")[1] is True
    assert verdict(cases[2:], "bulk HTTP enqueue vs PgQueuer batched") == ("n/a", None)
