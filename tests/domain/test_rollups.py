"""Per-minute rollups of the last hour for the console's charts: throughput,
errors, queue depth walked back from the depth now, and queue waits (p50/p95)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from jobgate.domain import rollups
from jobgate.domain.rollups import QueueDepth, Scope, Transition
from jobgate.domain.states import JobState

NOW = datetime(2026, 1, 1, 12, 30, 30, tzinfo=UTC)
Q, R, S, F = JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED


def t(
    job: str,
    frm: JobState | None,
    to: JobState,
    ago_s: float,
    *,
    tenant: str = "ten_a",
    provider: str = "sim",
    queued_ago_s: float | None = None,
    run_at_ago_s: float | None = None,
) -> Transition:
    at = NOW - timedelta(seconds=ago_s)
    return Transition(
        job_id=job,
        tenant_id=tenant,
        provider=provider,
        from_state=frm,
        to_state=to,
        reason=None,
        at=at,
        queued_at=None if queued_ago_s is None else NOW - timedelta(seconds=queued_ago_s),
        run_at=NOW - timedelta(seconds=run_at_ago_s if run_at_ago_s is not None else ago_s + 999),
    )


def test_throughput_errors_and_error_rate_by_minute() -> None:
    rows = [
        t("a", R, S, 10),
        t("b", R, S, 20),
        t("c", R, Q, 25),  # a retry: an attempt that ended in an error
        t("d", R, F, 90),
        t("e", Q, JobState.CANCELLED, 5),  # not an attempt
    ]
    rolled = rollups.rollup(rows, [], now=NOW)
    assert len(rolled.starts) == 60 and rolled.starts[-1] == datetime(
        2026, 1, 1, 12, 30, tzinfo=UTC
    )
    assert rolled.succeeded[-1] == 2 and rolled.errors[-1] == 1
    assert rolled.error_rate[-1] == 1 / 3
    assert rolled.errors[-2] == 1 and rolled.error_rate[-2] == 1.0
    assert rolled.error_rate[0] is None and rolled.complete


def test_depth_is_walked_back_from_the_depth_now() -> None:
    # Now 2 queued. In this minute one arrived and one was claimed; a minute ago 3 arrived.
    rows = [
        t("x", None, Q, 5),
        t("y", Q, R, 10, queued_ago_s=70),
        t("y", None, Q, 70),
        t("z", None, Q, 75),
        t("w", None, Q, 80),
    ]
    rolled = rollups.rollup(rows, [QueueDepth("ten_a", "sim", 2)], now=NOW)
    assert rolled.depth[-1] == 2  # now, and at the start of this minute: 2 - 1 + 1
    assert rolled.depth[-2] == 2  # the previous minute ended with 2
    assert rolled.depth[-3] == 0  # before the three arrivals
    assert rolled.depth[0] == 0


def test_each_minute_shows_its_peak_depth() -> None:
    # Ten jobs arrived and were all claimed within the previous minute: its peak is 10, though
    # it started and ended empty.
    rows = [t(f"a{i}", None, Q, 80 - i) for i in range(10)]
    rows += [t(f"a{i}", Q, R, 60 - i, queued_ago_s=80 - i) for i in range(10)]
    rolled = rollups.rollup(rows, [], now=NOW)
    assert rolled.depth[-2] == 10 and rolled.depth[-1] == 0 and rolled.depth[-3] == 0


def test_waits_start_at_the_later_of_queued_and_due() -> None:
    rows = [
        t("a", Q, R, 10, queued_ago_s=40),  # waited 30 s
        t("b", Q, R, 12, queued_ago_s=100, run_at_ago_s=22),  # due 22 s ago: waited 10 s
        t("c", Q, R, 14, queued_ago_s=None),  # queued before anything known: no wait
    ]
    rolled = rollups.rollup(rows, [], now=NOW)
    assert rolled.wait_p50_s[-1] == 10 and rolled.wait_p95_s[-1] == 30
    assert rollups.wait_s(t("d", R, S, 1)) is None


def test_scope_keeps_one_tenant_and_provider() -> None:
    rows = [
        t("a", R, S, 10, tenant="ten_a", provider="openai"),
        t("b", R, S, 10, tenant="ten_b", provider="openai"),
        t("c", R, S, 10, tenant="ten_a", provider="sim"),
    ]
    depth = [QueueDepth("ten_a", "openai", 4), QueueDepth("ten_b", "openai", 1)]
    one = rollups.rollup(rows, depth, now=NOW, scope=Scope("ten_a", "openai"))
    assert one.succeeded[-1] == 1 and one.depth[-1] == 4
    provider = rollups.rollup(rows, depth, now=NOW, scope=Scope(provider="openai"))
    assert provider.succeeded[-1] == 2 and provider.depth[-1] == 5
    nobody = rollups.rollup(rows, depth, now=NOW, scope=Scope(tenant_id=""))
    assert sum(nobody.succeeded) == 0 and nobody.depth[-1] == 0


def test_summaries_by_tenant_and_provider() -> None:
    rows = [t("a", R, S, 10), t("b", R, F, 10), t("c", Q, R, 10, queued_ago_s=16)]
    [summary] = rollups.summaries(rows, [QueueDepth("ten_a", "sim", 3)])
    assert (summary.queued, summary.succeeded, summary.errors) == (3, 1, 1)
    assert summary.error_rate == 0.5 and summary.wait_p50_s == 6


def test_transitions_outside_the_hour_are_ignored_and_a_capped_read_is_flagged() -> None:
    rows = [t("old", R, S, 3700), t("future", R, S, -120)]
    rolled = rollups.rollup(rows, [], now=NOW, capped=True)
    assert sum(rolled.succeeded) == 0 and not rolled.complete


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=50))
def test_percentiles_are_values_and_ordered(values: list[float]) -> None:
    p50 = rollups.percentile(values, 0.5)
    p95 = rollups.percentile(values, 0.95)
    assert p50 in values and p95 in values and p50 is not None and p95 is not None
    assert min(values) <= p50 <= p95 <= max(values)
    assert rollups.percentile([], 0.5) is None


@given(
    st.lists(
        st.tuples(
            st.integers(0, 3599), st.sampled_from([(None, Q), (Q, R), (Q, JobState.CANCELLED)])
        ),
        max_size=40,
    ),
    st.integers(0, 100),
)
def test_depth_is_never_negative(
    events: list[tuple[int, tuple[JobState | None, JobState]]], now_depth: int
) -> None:
    rows = [t(f"j{i}", frm, to, ago) for i, (ago, (frm, to)) in enumerate(events)]
    rolled = rollups.rollup(rows, [QueueDepth("ten_a", "sim", now_depth)], now=NOW)
    assert all(d >= 0 for d in rolled.depth) and rolled.depth[-1] >= now_depth
