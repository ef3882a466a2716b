"""The verdict rules of every role that ends an attempt, one table per role, and the rule that
one condition gets one error body whoever noticed it."""

from __future__ import annotations

import inspect
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jobgate import errors
from jobgate.config import Settings
from jobgate.domain import verdicts
from jobgate.domain.backoff import full_jitter_s, jittered_wait_s
from jobgate.domain.job import Job, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.providers.background import Snapshot, Status
from jobgate.roles import settlements
from jobgate.storage.records import Settlement

T0 = datetime(2026, 1, 1, tzinfo=UTC)
Q, R, F, C, S = (
    JobState.QUEUED,
    JobState.RUNNING,
    JobState.FAILED,
    JobState.CANCELLED,
    JobState.SUCCEEDED,
)


def make_job(**fields: Any) -> Job:
    values: dict[str, Any] = {
        "id": "job_1",
        "tenant_id": "ten_1",
        "state": JobState.RUNNING,
        "api": "jobs",
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "request": {},
        "metadata": {},
        "webhook": None,
        "result": None,
        "error": None,
        "usage": None,
        "priority": 5,
        "attempt": 1,
        "max_attempts": 3,
        "run_count": 1,
        "lost_count": 0,
        "run_at": T0,
        "created_at": T0,
        "updated_at": T0,
        "started_at": T0,
        "completed_at": None,
        "cancel_requested_at": None,
        "expires_at": None,
        "execution_timeout_s": None,
        "deadline_at": None,
        "lease_owner": "w",
        "lease_token": "lt_1",
        "lease_expires_at": T0,
        "phase": None,
        "provider_job_id": "pj_1",
        "creation_outcome": None,
        "cancel_outcome": None,
        "reconcile_at": None,
        "dead_lettered": False,
        "purged_at": None,
        "event_seq": 1,
    }
    values.update(fields)
    return Job(**values)


def fixed_delay(attempt: int) -> float:
    return 10.0 * attempt


def summary(verdict: Finish | Settlement) -> dict[str, Any]:
    """The parts of a verdict each table pins down."""
    error = verdict.error or {}
    return {
        "state": verdict.state,
        "reason": verdict.reason,
        "code": error.get("code"),
        "type": error.get("type"),
        "dead_lettered": verdict.dead_lettered,
        "retry_in_s": verdict.retry_in_s,
        "count_attempt": verdict.count_attempt,
    }


def expect(
    state: JobState,
    reason: str,
    code: str | None = None,
    kind: str | None = None,
    *,
    dead: bool = False,
    retry_in_s: float = 0.0,
    counted: bool = True,
) -> dict[str, Any]:
    return {
        "state": state,
        "reason": reason,
        "code": code,
        "type": kind,
        "dead_lettered": dead,
        "retry_in_s": retry_in_s,
        "count_attempt": counted,
    }


# -- the reaper: a running job whose lease expired -----------------------------------------------

PAST = T0 - timedelta(seconds=1)
REAPER_TABLE: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("first loss retries", {}, expect(Q, "worker_lost", "worker_lost", "job_error", retry_in_s=10)),
    (
        "second attempt retries later",
        {"attempt": 2, "lost_count": 1},
        expect(Q, "worker_lost", "worker_lost", "job_error", retry_in_s=20),
    ),
    (
        "last attempt lost once",
        {"attempt": 3},
        expect(F, "worker_lost", "worker_lost", "job_error", dead=True),
    ),
    (
        "last attempt lost again",
        {"attempt": 3, "lost_count": 1},
        expect(F, "worker_lost_repeatedly", "worker_lost_repeatedly", "job_error", dead=True),
    ),
    (
        "past the deadline",
        {"deadline_at": PAST},
        expect(F, "deadline_exceeded", "deadline_exceeded", "timeout_error"),
    ),
    (
        "deadline not yet",
        {"deadline_at": T0 + timedelta(seconds=1)},
        expect(Q, "worker_lost", "worker_lost", "job_error", retry_in_s=10),
    ),
    (
        "cancel requested wins over the deadline",
        {"cancel_requested_at": PAST, "deadline_at": PAST, "attempt": 3},
        expect(C, "cancel_requested"),
    ),
]


@pytest.mark.parametrize(
    ("fields", "expected"), [c[1:] for c in REAPER_TABLE], ids=[c[0] for c in REAPER_TABLE]
)
def test_reaper(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    job = make_job(**fields)
    verdict, poisoning = verdicts.reap_verdict_or_poison(job, now=T0, retry_delay=fixed_delay)
    assert poisoning is None
    assert summary(verdict) == expected
    assert verdict.lost and verdict.actor == "reaper"
    assert verdict.lease == Lease(job.id, "lt_1")
    if expected["state"] is C:
        assert verdict.cancel_outcome == "interrupted"


def test_reaper_fails_a_damaged_job_alone_without_raising() -> None:
    job = make_job(damaged=("request", "deadline_at"))
    verdict, poisoning = verdicts.reap_verdict_or_poison(job, now=T0, retry_delay=fixed_delay)
    assert summary(verdict) == expect(F, "poison_job", "poison_job", "job_error", dead=True)
    assert poisoning == verdicts.Poisoning(
        job.id, "stored values could not be read: request, deadline_at"
    )
    assert verdict.error is not None and poisoning.detail in verdict.error["message"]


def test_reaper_fails_a_job_whose_judging_raises_with_the_exception() -> None:
    def broken(_: int) -> float:
        raise KeyError("a stored value")

    verdict, poisoning = verdicts.reap_verdict_or_poison(make_job(), now=T0, retry_delay=broken)
    assert verdict.reason == "poison_job" and verdict.dead_lettered
    assert poisoning is not None and isinstance(poisoning.exc, KeyError)
    assert poisoning.detail == "handling the job raised KeyError"  # never the value


# -- the worker: each way a provider call ends ----------------------------------------------------


def unknown(safe: bool) -> errors.ProviderOutcomeUnknown:
    return errors.ProviderOutcomeUnknown("no answer", safe_to_retry=safe)


WORKER_TABLE: list[tuple[str, errors.ProviderError, dict[str, Any], str, dict[str, Any]]] = [
    (
        "retryable retries",
        errors.ProviderRetryable("boom", code="server_error"),
        {},
        "fail",
        expect(Q, "retryable_error", "server_error", "server_error", retry_in_s=10),
    ),
    (
        "retryable on the last attempt dead-letters",
        errors.ProviderRetryable("boom", code="server_error"),
        {"attempt": 3},
        "fail",
        expect(F, "attempts_exhausted", "server_error", "server_error", dead=True),
    ),
    (
        "rate limit waits, uncounted",
        errors.ProviderRateLimited("slow", retry_after_s=7),
        {"attempt": 3},
        "fail",
        expect(
            Q,
            "rate_limited",
            "rate_limit_exceeded",
            "rate_limit_error",
            retry_in_s=7,
            counted=False,
        ),
    ),
    (
        "fatal fails at once",
        errors.ProviderFatal("bad", code="invalid_value"),
        {},
        "fail",
        expect(F, "fatal_error", "invalid_value", "invalid_request_error"),
    ),
    (
        "quota fails at once",
        errors.ProviderQuotaExceeded("quota", code="insufficient_quota"),
        {},
        "fail",
        expect(F, "fatal_error", "insufficient_quota", "insufficient_quota"),
    ),
    (
        "unknown outcome fails under `fail`",
        unknown(safe=False),
        {},
        "fail",
        expect(F, "creation_outcome_unknown", "creation_outcome_unknown", "provider_error"),
    ),
    (
        "unknown outcome retries under `retry`",
        unknown(safe=False),
        {},
        "retry",
        expect(Q, "retryable_error", "creation_outcome_unknown", "provider_error", retry_in_s=10),
    ),
    (
        "unknown outcome retries when the provider deduplicates",
        unknown(safe=True),
        {},
        "fail",
        expect(Q, "retryable_error", "creation_outcome_unknown", "provider_error", retry_in_s=10),
    ),
]


@pytest.mark.parametrize(
    ("exc", "fields", "policy", "expected"),
    [c[1:] for c in WORKER_TABLE],
    ids=[c[0] for c in WORKER_TABLE],
)
def test_worker(
    exc: errors.ProviderError, fields: dict[str, Any], policy: Any, expected: dict[str, Any]
) -> None:
    verdict = verdicts.failed(
        make_job(**fields), exc, actor="w1", retry_delay=fixed_delay, unknown_outcome=policy
    )
    assert summary(verdict) == expected
    assert verdict.actor == "w1" and not verdict.lost
    if isinstance(exc, errors.ProviderOutcomeUnknown):
        assert verdict.creation_outcome == "unknown"


def test_worker_endings_without_a_provider_error() -> None:
    job = make_job()
    assert summary(verdicts.succeeded(job, actor="w", result={"ok": 1}, usage={})) == expect(
        S, "completed"
    )
    assert summary(verdicts.cancelled(job, actor="w")) == expect(C, "cancel_requested")
    assert summary(verdicts.released(job, actor="w")) == expect(Q, "worker_shutdown", counted=False)
    assert summary(verdicts.deadline_exceeded(job, actor="w")) == expect(
        F, "deadline_exceeded", "deadline_exceeded", "timeout_error"
    )
    bug = verdicts.internal_error(
        job, ZeroDivisionError(), actor="w", retry_delay=fixed_delay, unknown_outcome="fail"
    )
    assert summary(bug) == expect(
        Q, "retryable_error", "internal_error", "server_error", retry_in_s=10
    )
    assert summary(verdicts.died_mid_create(job, actor="w")) == expect(
        F, "creation_outcome_unknown", "creation_outcome_unknown", "provider_error"
    )


def test_a_verdict_the_database_refused_becomes_poison_under_the_same_lease() -> None:
    refused = verdicts.succeeded(make_job(), actor="w", result={"a": "\x00"}, usage={})
    poison = verdicts.poison_finish(refused, "its verdict could not be stored (DataError)")
    assert poison.lease == refused.lease and poison.actor == "w"
    assert summary(poison) == expect(F, "poison_job", "poison_job", "job_error", dead=True)


# -- the reconciler: a provider's answer about a background job ----------------------------------


def snapshot(status: str, error: errors.ProviderError | None = None) -> Snapshot:
    return Snapshot(provider_job_id="pj_1", status=status, body={}, error=error)


RECONCILER_TABLE: list[tuple[str, Snapshot, dict[str, Any], bool, dict[str, Any]]] = [
    ("completed", snapshot(Status.COMPLETED), {}, False, expect(S, "completed")),
    (
        "cancelled at the provider",
        snapshot(Status.CANCELLED),
        {},
        False,
        expect(C, "cancelled_at_provider"),
    ),
    (
        "failed retryable retries",
        snapshot(Status.FAILED, errors.ProviderRetryable("x", code="server_error")),
        {},
        False,
        expect(Q, "retryable_error", "server_error", "server_error", retry_in_s=10),
    ),
    (
        "failed retryable on the last attempt dead-letters",
        snapshot(Status.FAILED, errors.ProviderRetryable("x", code="server_error")),
        {"attempt": 3},
        False,
        expect(F, "attempts_exhausted", "server_error", "server_error", dead=True),
    ),
    (
        "failed for good",
        snapshot(Status.FAILED, errors.ProviderFatal("x", code="invalid_value")),
        {},
        False,
        expect(F, "failed_at_provider", "invalid_value", "invalid_request_error"),
    ),
    (
        "quota is typed as the worker types it",
        snapshot(Status.FAILED, errors.ProviderQuotaExceeded("x", code="insufficient_quota")),
        {},
        False,
        expect(F, "failed_at_provider", "insufficient_quota", "insufficient_quota"),
    ),
    (
        "a failure after a cancel request is final",
        snapshot(Status.FAILED, errors.ProviderRetryable("x", code="server_error")),
        {},
        True,
        expect(F, "failed_at_provider", "server_error", "server_error"),
    ),
]


@pytest.mark.parametrize(
    ("answer", "fields", "cancel_wanted", "expected"),
    [c[1:] for c in RECONCILER_TABLE],
    ids=[c[0] for c in RECONCILER_TABLE],
)
def test_reconciler(
    answer: Snapshot, fields: dict[str, Any], cancel_wanted: bool, expected: dict[str, Any]
) -> None:
    settings = Settings(retry_base_s=10.0, retry_max_s=10.0)
    verdict = settlements.from_snapshot(
        make_job(**fields), answer, None, cancel_wanted=cancel_wanted, settings=settings
    )
    got = summary(verdict)
    if got["state"] is Q and got["reason"] == "retryable_error":
        assert 0 <= got.pop("retry_in_s") <= 10  # full jitter
        expected = {k: v for k, v in expected.items() if k != "retry_in_s"}
    assert got == expected


# -- one condition, one error body ----------------------------------------------------------------


def test_a_deadline_is_the_same_error_for_the_reaper_the_worker_and_the_reconciler() -> None:
    job = make_job(deadline_at=PAST)
    reaper = verdicts.reap_verdict(job, now=T0, retry_delay=fixed_delay)
    worker = verdicts.deadline_exceeded(job, actor="w1")
    reconciler = settlements.deadline_exceeded(job, snapshot(Status.IN_PROGRESS))
    assert (
        reaper.error
        == worker.error
        == reconciler.error
        == {
            "code": "deadline_exceeded",
            "message": "the job ran past its execution deadline",
            "type": "timeout_error",
        }
    )
    assert reaper.reason == worker.reason == reconciler.reason == "deadline_exceeded"
    assert reaper.state is worker.state is reconciler.state is F


def test_poison_is_the_same_error_for_every_role() -> None:
    job = make_job()
    lease_holder = verdicts.poison_verdict(job, "d", actor="w1")
    reconciler = settlements.poison(job, "d")
    assert lease_holder.error == reconciler.error == verdicts.poison_error("d")
    assert lease_holder.dead_lettered and reconciler.dead_lettered


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (errors.ProviderRetryable("m"), "server_error"),
        (errors.ProviderRateLimited("m", retry_after_s=1), "rate_limit_error"),
        (errors.ProviderFatal("m"), "invalid_request_error"),
        (errors.ProviderQuotaExceeded("m"), "insufficient_quota"),
        (errors.ProviderOutcomeUnknown("m"), "provider_error"),
        (errors.ProviderCancelUnsupported("m"), "provider_error"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v,
)
def test_error_type_by_class(exc: errors.ProviderError, kind: str) -> None:
    assert verdicts.error_type_of(exc) == kind


def test_provider_error_body_keeps_the_status_and_request_id() -> None:
    exc = errors.ProviderFatal("bad", code="invalid_value", status_code=400)
    exc.request_id = "req_1"
    assert verdicts.provider_error_body(exc) == {
        "code": "invalid_value",
        "message": "bad",
        "type": "invalid_request_error",
        "status_code": 400,
        "request_id": "req_1",
    }


def test_redrive_refused_names_why() -> None:
    assert verdicts.redrive_refused(make_job(state=F, purged_at=T0)).code == "job_purged"
    assert verdicts.redrive_refused(make_job(state=F)).code == "job_not_dead_lettered"


# -- rate limits: waited out, uncounted up to a bound --------------------------------------------


def _rate_limited(job: Job, retry_after_s: float) -> Finish:
    exc = errors.ProviderRateLimited("slow down", retry_after_s=retry_after_s)
    return verdicts.failed(job, exc, actor="w", retry_delay=lambda _: 0.0, unknown_outcome="fail")


def test_a_rate_limit_naming_no_wait_still_waits() -> None:
    """A provider answering `retry-after: 0` (or a stream error naming no wait) forever must
    not draw calls as fast as the worker can send them."""
    finish = _rate_limited(make_job(), 0.0)
    assert finish.state is Q and not finish.count_attempt
    assert finish.retry_in_s == verdicts.RATE_LIMIT_MIN_WAIT_S


def test_a_rate_limit_wait_is_spread_but_never_shortened() -> None:
    exc = errors.ProviderRateLimited("slow down", retry_after_s=10.0)
    finish = verdicts.failed(
        make_job(), exc, actor="w", retry_delay=lambda _: 0.0, unknown_outcome="fail",
        rate_limit_wait=lambda s: s * 1.1,
    )  # fmt: skip
    assert finish.retry_in_s == pytest.approx(11.0)
    shorter = verdicts.failed(
        make_job(), exc, actor="w", retry_delay=lambda _: 0.0, unknown_outcome="fail",
        rate_limit_wait=lambda s: s / 2,
    )  # fmt: skip
    assert shorter.retry_in_s == 10.0


def test_uncounted_rate_limits_are_bounded_then_counted() -> None:
    bound = verdicts.MAX_UNCOUNTED_RETRIES
    # Claimed for the bound-th time without a counted attempt: still free.
    free = _rate_limited(make_job(attempt=1, run_count=bound), 5.0)
    assert free.state is Q and not free.count_attempt
    # One more: this rate limit counts, like any failed attempt.
    counted = _rate_limited(make_job(attempt=1, run_count=bound + 1), 5.0)
    assert counted.state is Q and counted.count_attempt and counted.reason == "rate_limited"
    assert counted.retry_in_s >= 5.0
    # And on the last attempt it fails the job, dead-lettered, with the provider's error.
    last = _rate_limited(make_job(attempt=3, max_attempts=3, run_count=bound + 3), 5.0)
    assert last.state is F and last.dead_lettered and last.reason == "attempts_exhausted"
    assert last.error is not None and last.error["type"] == "rate_limit_error"


def test_a_background_jobs_rate_limits_are_bounded_as_the_workers_are() -> None:
    """The reconciler's rule is the worker's: a rate limit the provider reports for a
    background job is free up to the bound, then counts, and then fails the job."""
    limited = snapshot(Status.FAILED, errors.ProviderRateLimited("x", retry_after_s=5.0))
    settings = Settings(retry_base_s=10.0, retry_max_s=10.0)

    def settle(**fields: Any) -> Any:
        job = make_job(**fields)
        return settlements.from_snapshot(job, limited, None, cancel_wanted=False, settings=settings)

    bound = verdicts.MAX_UNCOUNTED_RETRIES
    free = settle(attempt=1, run_count=bound)
    assert (free.state, free.reason, free.count_attempt) == (Q, "rate_limited", False)
    counted = settle(attempt=1, run_count=bound + 1)
    assert (counted.state, counted.reason, counted.count_attempt) == (Q, "rate_limited", True)
    assert counted.retry_in_s >= 5.0
    last = settle(attempt=3, max_attempts=3, run_count=bound + 3)
    assert (last.state, last.reason, last.dead_lettered) == (F, "attempts_exhausted", True)
    assert last.error is not None and last.error["type"] == "rate_limit_error"


def test_a_background_jobs_rate_limit_wait_is_jittered_as_the_workers_is() -> None:
    """Jobs a provider rate-limited together come back spread over a fifth more than the
    provider's wait, never sooner, whether the worker or the reconciler saw the limit."""
    limited = snapshot(Status.FAILED, errors.ProviderRateLimited("x", retry_after_s=10.0))
    settings = Settings(retry_base_s=1.0, retry_max_s=1.0)
    job = make_job(attempt=1, run_count=1)
    waits = [
        settlements.from_snapshot(
            job, limited, None, cancel_wanted=False, settings=settings, rng=random.Random(seed)
        ).retry_in_s
        for seed in range(20)
    ]
    assert all(10.0 <= wait <= 12.0 for wait in waits)
    assert len(set(waits)) == len(waits)


# -- one retry ladder for the worker and the reconciler ------------------------------------------

BOUND = verdicts.MAX_UNCOUNTED_RETRIES
LADDER_TABLE: list[tuple[str, errors.ProviderError, dict[str, Any], verdicts.Step]] = [
    (
        "a retryable error with attempts left waits the retry delay",
        errors.ProviderRetryable("x"),
        {"attempt": 1},
        verdicts.Step(Q, "retryable_error", retry_in_s=7.0),
    ),
    (
        "a retryable error on the last attempt dead-letters",
        errors.ProviderRetryable("x"),
        {"attempt": 3},
        verdicts.Step(F, "attempts_exhausted", dead_lettered=True),
    ),
    (
        "an unknown outcome retried climbs the same ladder",
        errors.ProviderOutcomeUnknown("x"),
        {"attempt": 3},
        verdicts.Step(F, "attempts_exhausted", dead_lettered=True),
    ),
    (
        "a rate limit within the bound is free, even on the last attempt",
        errors.ProviderRateLimited("x", retry_after_s=5.0),
        {"attempt": 3, "run_count": 3 + BOUND - 1},
        verdicts.Step(Q, "rate_limited", retry_in_s=5.0, count_attempt=False),
    ),
    (
        "a rate limit past the bound counts",
        errors.ProviderRateLimited("x", retry_after_s=0.0),
        {"attempt": 1, "run_count": 1 + BOUND},
        verdicts.Step(Q, "rate_limited", retry_in_s=verdicts.RATE_LIMIT_MIN_WAIT_S),
    ),
    (
        "a counted rate limit on the last attempt dead-letters",
        errors.ProviderRateLimited("x", retry_after_s=5.0),
        {"attempt": 3, "run_count": 3 + BOUND},
        verdicts.Step(F, "attempts_exhausted", dead_lettered=True),
    ),
]


@pytest.mark.parametrize(
    ("exc", "fields", "expected"),
    [c[1:] for c in LADDER_TABLE],
    ids=[c[0] for c in LADDER_TABLE],
)
def test_the_retry_ladder(
    exc: errors.ProviderError, fields: dict[str, Any], expected: verdicts.Step
) -> None:
    step = verdicts.retry_step(make_job(**fields), exc, retry_delay=lambda _: 7.0)
    assert step == expected


@pytest.mark.parametrize(
    ("exc", "fields"), [c[1:3] for c in LADDER_TABLE], ids=[c[0] for c in LADDER_TABLE]
)
def test_the_worker_and_the_reconciler_climb_the_one_ladder(
    exc: errors.ProviderError, fields: dict[str, Any]
) -> None:
    """The same failure on the same job is the same step for a worker's call and for a
    background job's answer (each with its own error body and its reason for a fatal error)."""
    job = make_job(**fields)
    settings = Settings(retry_base_s=4.0, retry_max_s=4.0)

    def delay(attempt: int) -> float:
        return full_jitter_s(attempt, base_s=4.0, cap_s=4.0, rng=random.Random(7))

    def jitter(wait_s: float) -> float:
        return jittered_wait_s(wait_s, rng=random.Random(7))

    expected = verdicts.retry_step(job, exc, retry_delay=delay, rate_limit_wait=jitter)
    worker = verdicts.failed(
        job, exc, actor="w", retry_delay=delay, unknown_outcome="retry", rate_limit_wait=jitter
    )
    reconciler = settlements.from_snapshot(
        job,
        snapshot(Status.FAILED, exc),
        None,
        cancel_wanted=False,
        settings=settings,
        rng=random.Random(7),
    )
    for verdict in (worker, reconciler):
        got = verdicts.Step(
            verdict.state,
            verdict.reason,
            retry_in_s=verdict.retry_in_s,
            count_attempt=verdict.count_attempt,
            dead_lettered=verdict.dead_lettered,
        )
        assert got == expected


def test_the_ladder_is_decided_in_the_domain_only() -> None:
    """The reconciler names no attempt bound of its own: it asks verdicts.retry_step."""
    source = inspect.getsource(settlements)
    assert "max_attempts" not in source and "rate_limit_counts" not in source
    assert "retry_step" in source
