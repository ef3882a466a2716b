"""The console's pure pieces: attempts from a job's events, the search box, and the SVG
charts (a gap breaks the line, a lone minute is a dot, labels are escaped)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from jobgate import errors
from jobgate.domain.job import JobEvent
from jobgate.domain.states import JobState
from jobgate.http.console import charts as charts
from jobgate.http.console import views as views

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Q, R = JobState.QUEUED, JobState.RUNNING


def event(seq: int, frm: JobState | None, to: JobState, at_s: float, **kw: object) -> JobEvent:
    return JobEvent(
        job_id="job_1",
        seq=seq,
        from_state=frm,
        to_state=to,
        actor=str(kw.get("actor", "worker:w1")),
        reason=kw.get("reason"),  # type: ignore[arg-type]
        applied=bool(kw.get("applied", True)),
        created_at=T0 + timedelta(seconds=at_s),
    )


def test_attempts_pair_each_claim_with_what_ended_it() -> None:
    events = [
        event(1, None, Q, 0, actor="api"),
        event(2, Q, R, 3),
        event(3, R, Q, 5, reason="retryable_error"),
        event(4, R, JobState.SUCCEEDED, 6, applied=False),  # a late duplicate: not an attempt
        event(5, Q, R, 9, actor="worker:w2"),
        event(6, R, JobState.FAILED, 19, reason="attempts_exhausted"),
        event(7, JobState.FAILED, Q, 30, actor="operator:ada", reason="redrive"),
        event(8, Q, R, 31),
    ]
    first, second, third = views.attempts(events)
    assert (first.number, first.waited_s, first.duration_s) == (1, 3, 2)
    assert (first.outcome, first.reason) == ("queued", "retryable_error")
    assert (second.waited_s, second.duration_s, second.worker) == (4, 10, "worker:w2")
    assert (second.outcome, second.reason) == ("failed", "attempts_exhausted")
    assert (third.outcome, third.duration_s, third.waited_s) == ("running", None, 1)


def test_the_search_box_reads_ids_and_metadata() -> None:
    assert views.ConsoleFilter.read({"q": " job_1 "}).identifier() == "job_1"
    pairs = views.ConsoleFilter.read({"q": "customer=c-42, run=7"})
    assert pairs.identifier() is None and pairs.metadata() == {"customer": "c-42", "run": "7"}
    assert pairs.job_filter(None, T0).metadata == {"customer": "c-42", "run": "7"}
    dead = views.ConsoleFilter.read({"dead": "1", "status": "failed", "tenant": "acme"})
    where = dead.job_filter("ten_1", T0)
    assert where.dead_lettered is True and where.states == (JobState.FAILED,)
    assert dead.query() == {"dead": "1", "status": "failed", "tenant": "acme"}
    recent = views.ConsoleFilter.read({"since": "1h"}).job_filter(None, T0)
    assert recent.created_after == T0 - timedelta(hours=1) and recent.created_before is None
    for bad in (
        {"q": "=x"},
        {"status": "done"},
        {"model": "m" * 201},
        {"q": "a=1 b"},
        {"since": "2h"},
    ):
        with pytest.raises(errors.InvalidRequest):
            views.ConsoleFilter.read(bad).job_filter(None, T0)


def test_the_search_box_reads_model_provider_and_any_metadata_key() -> None:
    box = views.ConsoleFilter.read({"q": "model=gpt-4.1 provider=openai user=alice"})
    where = box.job_filter(None, T0)
    assert (where.model, where.provider, where.metadata) == ("gpt-4.1", "openai", {"user": "alice"})
    assert box.identifier() is None and box.metadata() == {"user": "alice"}
    keyed = views.ConsoleFilter.read({"q": "metadata[model]=x, metadata[]=y"})
    assert keyed.job_filter(None, T0).metadata == {"model": "x", "metadata[]": "y"}
    assert keyed.job_filter(None, T0).model is None
    same = views.ConsoleFilter.read({"q": "model=m", "model": "m"}).job_filter(None, T0)
    assert same.model == "m"
    for bad in ({"q": "model=a", "model": "b"}, {"q": "provider="}):
        with pytest.raises(errors.InvalidRequest):
            views.ConsoleFilter.read(bad).job_filter(None, T0)


def test_charts_break_at_gaps_dot_lone_points_and_escape_labels() -> None:
    svg = str(
        charts.line_chart(
            "c<1>",
            "Wait <p95>",
            [charts.Line("p95", [1.0, 2.0, None, 3.0, None, 8.0, 9.0], "s1")],
            unit=charts.seconds,
        )
    )
    assert "<p95>" not in svg and "&lt;p95&gt;" in svg and 'id="c&lt;1&gt;"' in svg
    path = svg.split(' d="')[1].split('"')[0]
    assert path.count("M") == 3 and path.count("L") == 2  # three runs, the lone one a move
    assert svg.count("<circle") == 1
    assert ">10 s<" in svg  # the scale's top: the next 1-2-5 step above 9
    empty = str(charts.line_chart("e", "Empty", [charts.Line("x", [None] * 60, "s2")]))
    assert "<b>—</b>" in empty and ">1.0<" in empty


def test_a_chart_says_its_window_and_each_minutes_values_on_hover() -> None:
    svg = str(
        charts.line_chart(
            "t",
            "Throughput (jobs per minute)",
            [
                charts.Line("succeeded", [1.0] * 57 + [2.0, 4.0, None], "s1"),
                charts.Line("errors", [0.0] * 60, "s3"),
            ],
            unit=charts.count,
        )
    )
    caption = svg.split("<figcaption>")[1].split("</figcaption>")[0]
    assert "last 60 min" in caption
    legend = re.sub(r"<[^>]+>", "", caption.split('class="legend">')[1])
    assert "succeeded 4 (1 min ago)" in legend and "errors 0 (this minute)" in legend
    hovers = re.findall(r"<title>(.*?)</title>", svg)
    assert len(hovers) == 60  # one per minute, shown by the browser on hover
    assert hovers[-1] == "this minute: succeeded —, errors 0"
    assert hovers[-2] == "1 min ago: succeeded 4, errors 0"
    assert hovers[0] == "59 min ago: succeeded 1, errors 0"


@pytest.mark.parametrize(
    ("peak", "top"), [(0, 1), (0.3, 0.5), (1, 1), (3, 5), (7, 10), (11, 20), (4000, 5000)]
)
def test_the_scale_top_is_a_round_number(peak: float, top: float) -> None:
    assert charts._nice_max(peak) == pytest.approx(top)
