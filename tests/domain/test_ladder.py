"""The one retry ladder (verdicts.ladder), over any attempt, bound and error class, and every
role that ends an attempt in failure (worker, reconciler, reaper, output refused) on it."""

from __future__ import annotations

import inspect
import random
from typing import Any

import hypothesis
from hypothesis import strategies as st

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain import verdicts
from jobgate.domain.states import JobState
from jobgate.providers.background import Snapshot, Status
from jobgate.roles import settlements
from tests.domain.test_verdicts import T0, make_job

BOUND = verdicts.MAX_UNCOUNTED_RETRIES
ERROR_CLASSES: dict[str, errors.ProviderError] = {
    "fatal": errors.ProviderFatal("x"),
    "quota": errors.ProviderQuotaExceeded("x"),
    "retryable": errors.ProviderRetryable("x"),
    "rate_limited": errors.ProviderRateLimited("x", retry_after_s=2.0),
    "unknown_outcome": errors.ProviderOutcomeUnknown("x"),
}


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, int]:
    max_attempts = draw(st.integers(1, 100))
    attempt = draw(st.integers(1, max_attempts + 2))
    uncounted = draw(st.integers(0, 2 * BOUND))
    return {"attempt": attempt, "max_attempts": max_attempts, "run_count": attempt + uncounted}


def _rung_of(state: JobState, dead_lettered: bool) -> verdicts.Rung:
    if state is JobState.QUEUED:
        return "retry"
    assert state is JobState.FAILED
    return "dead_letter" if dead_lettered else "fail"


@hypothesis.given(fields=jobs(), fatal=st.booleans(), rate_limited=st.booleans())
def test_the_ladder(fields: dict[str, int], fatal: bool, rate_limited: bool) -> None:
    step = verdicts.ladder(**fields, fatal=fatal, rate_limited=rate_limited)
    uncounted_in_a_row = fields["run_count"] - fields["attempt"]
    counted = not rate_limited or uncounted_in_a_row >= BOUND
    last = fields["attempt"] >= fields["max_attempts"]
    if fatal:
        assert step == verdicts.Climb("fail")
    elif counted and last:
        assert step == verdicts.Climb("dead_letter")
    else:
        assert step == verdicts.Climb("retry", count_attempt=counted)
    # A counted retry always leaves an attempt: max_attempts bounds every job.
    assert not (step.rung == "retry" and step.count_attempt and last)


@hypothesis.given(
    max_attempts=st.integers(1, 20),
    kinds=st.lists(st.sampled_from(["retryable", "rate_limited"]), min_size=1, max_size=5),
)
def test_a_job_failing_forever_ends_dead_lettered_after_its_attempts(
    max_attempts: int, kinds: list[str]
) -> None:
    """Failures of any non-fatal mix end the job dead-lettered once it has run max_attempts
    counted attempts, after at most BOUND uncounted rate limits per attempt."""
    attempt, run_count = 1, 1
    for run in range(max_attempts * (BOUND + 1) + 1):
        step = verdicts.ladder(
            attempt=attempt,
            max_attempts=max_attempts,
            run_count=run_count,
            fatal=False,
            rate_limited=kinds[run % len(kinds)] == "rate_limited",
        )
        if step.rung != "retry":
            break
        run_count += 1
        attempt += 1 if step.count_attempt else 0
    assert step.rung == "dead_letter"
    assert attempt == max_attempts


@hypothesis.given(fields=jobs(), kind=st.sampled_from(sorted(ERROR_CLASSES)))
def test_the_worker_and_the_reconciler_are_on_the_ladder(fields: dict[str, int], kind: str) -> None:
    job = make_job(**fields)
    exc = ERROR_CLASSES[kind]
    expected = verdicts.climb(job, exc)
    worker = verdicts.failed(
        job, exc, actor="w", retry_delay=lambda _: 3.0, unknown_outcome="retry"
    )
    snapshot = Snapshot("resp_1", Status.FAILED, {}, error=exc)
    reconciler = settlements.from_snapshot(
        job, snapshot, None, cancel_wanted=False, settings=Settings(), rng=random.Random(1)
    )
    step = verdicts.retry_step(job, exc, retry_delay=lambda _: 3.0)
    verdict: Any
    for verdict in (worker, reconciler, step):
        assert _rung_of(verdict.state, verdict.dead_lettered) == expected.rung
        assert verdict.count_attempt == expected.count_attempt


@hypothesis.given(fields=jobs())
def test_a_lost_worker_and_a_refused_output_are_on_the_ladder(fields: dict[str, int]) -> None:
    """jobgate's own failures climb the ladder as a retryable error does."""
    job = make_job(**fields)
    expected = verdicts.climb(job, errors.ProviderRetryable("x"))
    reaped = verdicts.reap_verdict(job, now=T0, retry_delay=lambda _: 3.0)
    refused = verdicts.output_not_stored(job, actor="w", retry_delay=lambda _: 3.0)
    for verdict in (reaped, refused):
        assert _rung_of(verdict.state, verdict.dead_lettered) == expected.rung
        assert verdict.count_attempt


def test_the_reconciler_names_no_rung_of_its_own() -> None:
    source = inspect.getsource(settlements)
    assert "isinstance(exc, errors.ProviderFatal)" not in source
    assert "max_attempts" not in source and "rate_limit_counts" not in source
