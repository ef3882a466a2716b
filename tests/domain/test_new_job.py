"""NewJob.queued: the job an insert stored, built from the submitted job and the times the
database computed, without reading the row back: every field as a stored, never-run job holds
it."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from jobgate.domain.job import Job, NewJob
from jobgate.domain.states import JobState

CREATED = datetime(2026, 12, 2, 7, 0, tzinfo=UTC)


def test_queued_is_the_stored_never_run_job() -> None:
    new = NewJob(
        id="job_1",
        tenant_id="ten_1",
        provider="sim",
        endpoint="/v1/chat/completions",
        model="sim-echo",
        request={"model": "sim-echo"},
        metadata={"n": 1},
        webhook={"url": "https://example.com/h", "event_types": []},
        api="responses",
        priority=7,
        max_attempts=4,
        start_timeout_s=30.0,
        execution_timeout_s=12.5,
        concurrency_key="k",
        model_route="alias",
    )
    run_at, expires_at = CREATED + timedelta(seconds=5), CREATED + timedelta(seconds=35)
    built = new.queued(
        created_at=CREATED, run_at=run_at, expires_at=expires_at, damaged=("run_at",)
    )
    expected = Job(
        id="job_1",
        tenant_id="ten_1",
        state=JobState.QUEUED,
        api="responses",
        provider="sim",
        endpoint="/v1/chat/completions",
        model="sim-echo",
        request=new.request,
        metadata=new.metadata,
        webhook=new.webhook,
        result=None,
        error=None,
        usage=None,
        priority=7,
        attempt=0,
        max_attempts=4,
        run_count=0,
        lost_count=0,
        run_at=run_at,
        created_at=CREATED,
        updated_at=CREATED,
        started_at=None,
        completed_at=None,
        cancel_requested_at=None,
        expires_at=expires_at,
        execution_timeout_s=12.5,
        deadline_at=None,
        lease_owner=None,
        lease_token=None,
        lease_expires_at=None,
        phase=None,
        provider_job_id=None,
        creation_outcome=None,
        cancel_outcome=None,
        reconcile_at=None,
        dead_lettered=False,
        purged_at=None,
        event_seq=1,
        damaged=("run_at",),
        concurrency_key="k",
        model_route="alias",
    )
    assert type(built) is Job
    assert built == expected
    for field in dataclasses.fields(Job):  # == would not tell 0 from False or 1 from True
        assert type(getattr(built, field.name)) is type(getattr(expected, field.name))
