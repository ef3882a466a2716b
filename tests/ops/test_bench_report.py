"""bench.report: under the targets table, a missed drain target is shown as this run's CPU budget
beside both systems' CPU per job, with why each kind of target is missed; a run that meets every
target shows neither."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from bench import report
from bench.results import Case
from bench.targets import drain_budget

ROOT = Path(__file__).resolve().parents[2]


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
    # Parity with 20,000 jobs/s on 2 cores: 2,000 ms / 20,000 per job.
    assert "1x PgQueuer's 20,000 jobs/s is 20,000 jobs/s" in line and "at most 0.100 ms" in line
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


def results(date: str) -> dict[str, Any]:
    """The smallest run record report.markdown reads."""
    machine = {"cpu": "x", "cpus": 2, "cpus_usable": 2, "memory_gib": 1, "os": "Linux"}
    machine |= {"python": "3.11", "packages": {}}
    run = {"date": date, "command": "python -m bench", "size": "full", "seconds": 60}
    return {"run": run, "machine": machine, "postgres": {}, "cases": []}


def test_the_page_shows_how_figures_are_taken_and_the_analysis_of_its_own_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    analysis = tmp_path / "analysis.md"
    analysis.write_text("<!-- analysis of the run of 2030-01-02 03:04 UTC: -->\n## Shows\n\nWhy.\n")
    monkeypatch.setattr(report, "ANALYSIS", analysis)
    page = report.markdown(results("2030-01-02 03:04 UTC"), None)
    assert "## How the numbers are taken" in page
    assert page.endswith("## Shows\n\nWhy.\n")
    assert "analysis of the run" not in page
    other = report.markdown(results("2030-02-01 00:00 UTC"), None)
    assert "Why." not in other
    assert "Not analysed yet: bench/analysis.md analyses another run" in other


def test_the_committed_page_holds_its_sources_text_and_no_diary() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    measured = re.search(r"^Measured on (.+?) with ", page, re.MULTILINE)
    assert measured is not None
    first, _, analysis = report.ANALYSIS.read_text().partition("\n")
    assert f"the run of {measured[1]}:" in first, "bench/analysis.md analyses another run"
    assert report.METHOD.read_text().strip() in page
    assert page.endswith(analysis.strip() + "\n"), "regenerate: python -m bench.report"
    assert not (ROOT / "bench" / "notes.md").exists()
    assert not (ROOT / "bench" / "prototypes").exists()
    assert len(page.splitlines()) < 400


def test_the_backlog_and_history_runs_are_shown_as_they_were_written_before_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/backlog.md (python -m bench.backlog --docs, on demand) and bench/history.md (the
    last full run of the history section) keep their own dates and commands; every regenerated
    page shows them, before the machine they ran on."""
    backlog = tmp_path / "backlog.md"
    backlog.write_text("## Status reads behind a backlog\n\nMeasured on then.\n")
    history = tmp_path / "history.md"
    history.write_text("## A history of millions of jobs against none\n\nMeasured later.\n")
    monkeypatch.setattr(report, "BACKLOG", backlog)
    monkeypatch.setattr(report, "HISTORY", history)
    page = report.markdown(results("2030-01-02 03:04 UTC"), None)
    assert (
        "## Status reads behind a backlog\n\nMeasured on then.\n\n"
        "## A history of millions of jobs against none\n\nMeasured later.\n\n## Machine"
    ) in page
    committed = (ROOT / "docs" / "benchmarks.md").read_text()
    sections = [
        (ROOT / "bench" / name).read_text().rstrip() for name in ("backlog.md", "history.md")
    ]
    assert "\n\n".join(sections) + "\n\n## Machine" in committed
