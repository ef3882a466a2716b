"""postgres.insert_many.insert_payloads: the members every job of a batch has alike (SHARED: tenant,
api, provider, endpoint, model, priority, max_attempts, execution timeout) travel once, as the
statement's :shared object, and only the rest per job; the statements coalesce the two. Pinned
here: what is sent (each job's members, shared or its own, are exactly insert_payload's), and
that the rows stored are the jobs' own values, on both stores, for batches alike in every
member, in some, and in none (what an insert answers equals job_get: test_insert_answers)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobgate import errors
from jobgate.domain.job import Job, NewJob
from jobgate.storage.postgres.executor import PostgresCodec
from jobgate.storage.postgres.insert_many import SHARED, insert_payload, insert_payloads
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Tenant
from tests.storage.helpers import insert_many, insert_streamed, make_tenant, new_job, queued

TENANT = Tenant(
    id="ten_acme", name="acme", webhook_secret="whsec", created_at=datetime(2026, 12, 3, tzinfo=UTC)
)
OTHER = Tenant(
    id="ten_other",
    name="other",
    webhook_secret="whsec",
    created_at=datetime(2026, 12, 3, tzinfo=UTC),
)


def _check_sent(jobs: list[NewJob]) -> tuple[list[dict[str, object]], dict[str, object]]:
    codec = PostgresCodec()
    rows, shared = insert_payloads(jobs, codec)
    assert set(shared) <= set(SHARED)
    for job, row in zip(jobs, rows, strict=True):
        assert not set(row) & set(shared)  # a member is shared or the job's own, never both
        assert {**row, **shared} == insert_payload(job, codec)
    return rows, shared


def test_a_one_tenant_batch_sends_what_its_jobs_share_once() -> None:
    jobs = [new_job(TENANT, request={"n": i}, metadata={"i": i} if i else {}) for i in range(3)]
    rows, shared = _check_sent(jobs)
    assert shared == {
        "tenant_id": "ten_acme",
        "api": "jobs",
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "model": "sim-echo",
        "priority": jobs[0].priority,
        "max_attempts": jobs[0].max_attempts,
    }  # no execution timeout: a null is left out, as insert_payload leaves it out
    assert [set(row) for row in rows] == [{"id", "request"}, *[{"id", "request", "metadata"}] * 2]


def test_members_that_differ_stay_with_each_job() -> None:
    jobs = [
        new_job(TENANT, priority=1, execution_timeout_s=5.0),
        new_job(OTHER, priority=1, model=None, execution_timeout_s=5.0),
        new_job(TENANT, priority=9, api="responses", execution_timeout_s=5.0),
    ]
    rows, shared = _check_sent(jobs)
    assert shared == {
        "provider": "sim",
        "endpoint": "/v1/chat/completions",
        "max_attempts": jobs[0].max_attempts,
        "execution_timeout_s": 5.0,
    }
    assert rows[1] == {
        "id": jobs[1].id,
        "request": jobs[1].request,
        "tenant_id": "ten_other",
        "api": "jobs",
        "priority": 1,
    }  # its null model left out, as insert_payload leaves it out
    assert rows[0]["model"] == rows[2]["model"] == "sim-echo"


def test_a_batch_alike_in_nothing_sends_nothing_shared() -> None:
    jobs = [
        new_job(TENANT),
        new_job(
            OTHER,
            api="responses",
            provider="other",
            endpoint="/v1/responses",
            model=None,
            priority=0,
            max_attempts=1,
            execution_timeout_s=1.0,
        ),
    ]
    rows, shared = _check_sent(jobs)
    assert shared == {}
    assert rows == [insert_payload(job, PostgresCodec()) for job in jobs]


def _stored(job: Job) -> tuple[object, ...]:
    return tuple(getattr(job, name) for name in (*SHARED, "id", "request"))


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["many", "streamed"])
async def test_the_rows_hold_each_jobs_own_values(storage: Storage, how: str) -> None:
    tenant = await make_tenant(storage)
    other = await make_tenant(storage, "other")
    alike = [new_job(tenant, request={"n": i}, execution_timeout_s=7.5) for i in range(3)]
    mixed = [
        new_job(tenant, priority=1, model=None),
        new_job(other, priority=1, api="responses", execution_timeout_s=2.0),
        new_job(tenant, priority=8, max_attempts=1, model="sim-fast"),
    ]
    unlike = [
        new_job(tenant, execution_timeout_s=3.0),
        new_job(
            other,
            api="responses",
            provider="other",
            endpoint="/v1/responses",
            model=None,
            priority=0,
            max_attempts=1,
        ),
    ]
    assert insert_payloads(unlike, PostgresCodec())[1] == {}  # (the statement's :shared)
    for jobs in (alike, mixed, unlike):
        if how == "many":
            answered = await insert_many(storage, jobs=jobs)
        else:
            answered = await insert_streamed(storage, chunks=[jobs[:1], jobs[1:]])
        for job, new in zip(answered, jobs, strict=True):
            got = await storage.job_get(job_id=new.id)
            assert got == job
            assert _stored(got) == tuple(getattr(new, name) for name in (*SHARED, "id", "request"))


@pytest.mark.asyncio
async def test_an_unknown_tenant_shared_by_the_whole_batch_fails_it(storage: Storage) -> None:
    tenant = await make_tenant(storage)
    stray = [new_job(tenant, tenant_id="ten_nobody") for _ in range(3)]
    with pytest.raises(errors.StorageError):
        await insert_many(storage, jobs=stray)
    with pytest.raises(errors.StorageError):
        await insert_streamed(storage, chunks=[stray[:1], stray[1:]])
    assert await queued(storage, "ten_nobody") == 0
    assert all([await storage.job_get(job_id=job.id) is None for job in stray])
