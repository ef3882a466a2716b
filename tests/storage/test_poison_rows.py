"""Stored values no client could send any more (written before the edge checked them, or by
hand) never make a read, a list, a cancel or a claim raise, on either backend: times are clamped
in SQL when they are computed and on read, and a damaged column is named in `Job.damaged`."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest

from jobgate.domain.states import JobState
from jobgate.storage import rows
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_many, make_tenant, new_job, submit_one
from tests.storage.poison_rows import far_future, json_text, poisons, poke

TEN_YEARS = timedelta(seconds=rows.MAX_INTERVAL_S)


_NON_FINITE = {
    "postgres": {"inf": "'Infinity'", "-inf": "'-Infinity'", "nan": "'NaN'"},
    "sqlite": {"inf": "9e999", "-inf": "-9e999"},  # SQLite stores NaN as NULL
}


@pytest.mark.parametrize("by_id", [False, True], ids=["job_claim", "job_claim_by_id"])
@pytest.mark.parametrize("stored", ["3e11", "1e300", "-5", "inf", "-inf", "nan"])
async def test_a_claim_clamps_any_stored_execution_timeout(
    storage: Storage, clock: FakeClock, stored: str, by_id: bool
) -> None:
    finite = stored not in ("inf", "-inf", "nan")
    value = stored if finite else _NON_FINITE[storage.dialect].get(stored)
    if value is None:
        pytest.skip("SQLite cannot store NaN")
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    await poke(storage, "jobs", job.id, execution_timeout_s=value)
    if by_id:  # a broker transport's claim
        got = await storage.job_claim_by_id(
            worker_id="w", job_ids=[job.id], lease_ttl_s=60, now=clock.now()
        )
        [claimed] = got.claimed
    else:
        [claimed] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    # A non-finite timeout reads as none at all, and marks the job damaged (the worker fails it).
    assert claimed.damaged == (() if finite else ("execution_timeout_s",))
    assert claimed.deadline_at is not None
    assert claimed.started_at is not None
    assert claimed.started_at <= claimed.deadline_at <= claimed.started_at + TEN_YEARS
    again = await storage.job_get(job_id=job.id)
    assert again is not None and again.deadline_at == claimed.deadline_at


@pytest.mark.parametrize("start_timeout_s", [3e11, 1e300, float("inf")])
async def test_an_insert_clamps_the_start_deadline(
    storage: Storage, clock: FakeClock, start_timeout_s: float
) -> None:
    tenant = await make_tenant(storage)
    job = new_job(tenant, start_timeout_s=start_timeout_s)
    stored = (await submit_one(storage, job=job, now=clock.now())).job
    assert stored.expires_at is not None and not stored.damaged
    assert stored.expires_at <= stored.created_at + TEN_YEARS
    [batched] = await insert_many(
        storage, jobs=[new_job(tenant, start_timeout_s=start_timeout_s)], now=clock.now()
    )
    # (JSON carries the batch to PostgreSQL: an infinite timeout arrives as no deadline.)
    assert batched.expires_at is None or batched.expires_at <= batched.created_at + TEN_YEARS
    assert not batched.damaged


async def test_every_kind_of_poison_reads_lists_and_cancels(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    kinds = poisons(storage)
    ids = {}
    for name, columns in kinds.items():
        job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
        await poke(storage, "jobs", job.id, **columns)
        ids[name] = job.id
    for name, job_id in ids.items():
        read = await storage.job_get(job_id=job_id, tenant_id=tenant.id)
        assert read is not None, name
        assert read.damaged == tuple(kinds[name]), name
    listed = await storage.job_list(tenant_id=tenant.id, limit=50)
    assert {job.id for job in listed} == set(ids.values())
    for job_id in ids.values():
        cancelled = await storage.job_cancel(job_id=job_id, tenant_id=tenant.id, actor="api")
        assert cancelled is not None and cancelled.state is JobState.CANCELLED


async def test_times_past_year_9999_read_as_the_latest_time(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    far = far_future(storage)
    await poke(storage, "jobs", job.id, expires_at=far, deadline_at=far)
    read = await storage.job_get(job_id=job.id)
    assert read is not None
    assert (read.expires_at, read.deadline_at) == (rows.LATEST, rows.LATEST)
    assert set(read.damaged) == {"expires_at", "deadline_at"}
    assert await storage.job_expire_due(limit=10, now=clock.now()) == []  # compared, not read


async def test_json_beyond_what_orjson_reads_still_reads(
    storage: Storage, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    huge = '{"big": 123456789012345678901234567890, "far": 1e999}'
    if storage.dialect == "sqlite":  # jsonb refuses a lone surrogate
        huge = huge[:-1] + ', "lone\\ud800": "x\\udc00y"}'
    await poke(storage, "jobs", job.id, metadata=json_text(storage, huge))
    read = await storage.job_get(job_id=job.id)
    assert read is not None and not read.damaged
    # Made fit to be served again: a float, and U+FFFD for a lone surrogate.
    assert read.metadata["big"] == pytest.approx(1.2345678901234568e29)
    served = orjson.loads(orjson.dumps(read.metadata))
    assert served["far"] is None
    if storage.dialect == "sqlite":
        assert served["lone\ufffd"] == "x\ufffdy"


async def test_operator_views_read_poison_rows(storage: Storage, clock: FakeClock) -> None:
    """The dashboard and /metrics read across tenants: a queued job whose run_at no datetime
    can hold used to break both."""
    tenant = await make_tenant(storage)
    job = (await submit_one(storage, job=new_job(tenant), now=clock.now())).job
    long_ago = "'-infinity'::timestamptz" if storage.dialect == "postgres" else "-3e11"
    await poke(storage, "jobs", job.id, run_at=long_ago)
    [overview] = await storage.admin_overview(now=clock.now())
    assert overview.oldest_due_at == rows.EARLIEST
    listed = await storage.admin_job_list(limit=10)
    assert [j.id for j in listed] == [job.id] and listed[0].damaged == ("run_at",)
