"""bench.report: under the targets table, a missed drain target is shown as this run's CPU budget
beside both systems' CPU per job, with why each kind of target is missed; a run that meets every
target shows neither."""

from __future__ import annotations

import pytest
from bench import report
from bench.results import Case
from bench.targets import drain_budget


def drain(system: str, jobs_per_s: float, worker_ms: float, database_ms: float) -> Case:
    metrics: dict[str, float | None] = {
        "jobs_per_s": jobs_per_s,
        "worker_cpu_ms_per_job": worker_ms,
        "postgres_cpu_ms_per_job": database_ms,
    }
    return Case("drain", system, "postgres", "drain", {"processes": 2}, metrics)


def test_the_drain_target_reads_as_a_cpu_budget_per_job() -> None:
    cases = [drain("jobgate", 18_000, 0.025, 0.066), drain("pgqueuer", 20_000, 0.035, 0.034)]
    line = drain_budget(cases, cores=2)
    assert line is not None
    # 1.5 x 20,000 = 30,000 jobs/s on 2 cores: 2,000 ms / 30,000 per job.
    assert "30,000 jobs/s" in line and "at most 0.067 ms" in line
    assert "0.025 ms (workers) + 0.066 ms (PostgreSQL) = 0.091 ms" in line
    assert "0.035 + 0.034 = 0.069 ms" in line


def test_no_budget_without_both_drains_and_their_cpu_or_once_the_target_is_met() -> None:
    met = [drain("jobgate", 30_000, 0.025, 0.066), drain("pgqueuer", 20_000, 0.035, 0.034)]
    assert drain_budget(met, cores=2) is None
    assert drain_budget([drain("jobgate", 18_000, 0.025, 0.066)], cores=2) is None
    peer = drain("pgqueuer", 20_000, 0.035, 0.034)
    peer.metrics["postgres_cpu_ms_per_job"] = None
    assert drain_budget([drain("jobgate", 18_000, 0.025, 0.066), peer], cores=2) is None


@pytest.mark.parametrize(("jobgate_rate", "shown"), [(18_000.0, True), (31_000.0, False)])
def test_why_a_target_is_missed_is_shown_only_when_one_is(jobgate_rate: float, shown: bool) -> None:
    # Only the drain is measured: every other target is "not measured", which is no miss.
    cases = [drain("jobgate", jobgate_rate, 0.025, 0.066), drain("pgqueuer", 20_000, 0.035, 0.034)]
    lines = report.miss_lines(cases, cores=2)
    text = "\n".join(lines)
    assert ("Drain as a CPU budget" in text) is shown
    assert ("### Why a target is missed" in text) is shown
