"""What an insert answers is built from the NewJob and the times the database computed
(NewJob.queued), not read back: on SQLite and PostgreSQL alike it must equal what job_get
then reads, through every insert path (single, keyed, batched, bulk with and without keys),
for the strangest values the edge lets through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from jobgate.domain import ranges
from jobgate.domain.job import Job, NewJob
from jobgate.storage.protocol import Storage
from jobgate.storage.records import BulkItem, IdempotencyClaim, SubmitOutcome, Tenant
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_bulk, insert_many, make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio

STRANGE_JSON: dict[str, Any] = {
    "z": 1,
    "a": {"y": [], "b": {}, "é": "ünïcødé 🙂", "": None},
    "big": ranges.INT_MAX,
    "small": ranges.INT_MIN,
    "floats": [0.1, 1e300, -2.5e-300, 1e16, -0.0, 3.0],
    "text": 'quote " backslash \\ tab \t newline \n \u2028 \U0001f600',
    "flags": [True, False, None],
    "k" * ranges.MAX_KEY_CHARS: "the longest member name",
}
WEEK = ranges.MAX_TIMEOUT_S


def variety(tenant: Tenant, now: datetime) -> list[NewJob]:
    """NewJobs covering every column an insert writes, and their edges."""
    plus5 = timezone(timedelta(hours=5))
    return [
        new_job(tenant),
        new_job(tenant, metadata=STRANGE_JSON, request={"model": "m", "x": STRANGE_JSON}),
        new_job(tenant, metadata={"b": 2, "a": 1}, model=None, api="responses"),
        new_job(
            tenant,
            webhook={"url": "https://example.com/hook", "event_types": ["job.succeeded"]},
            priority=ranges.PRIORITY_MIN,
            max_attempts=1,
        ),
        new_job(tenant, priority=ranges.PRIORITY_MAX, max_attempts=ranges.MAX_ATTEMPTS_MAX),
        new_job(tenant, start_timeout_s=ranges.MIN_TIMEOUT_S, execution_timeout_s=WEEK),
        new_job(tenant, start_timeout_s=WEEK, execution_timeout_s=ranges.MIN_TIMEOUT_S),
        new_job(tenant, delay_s=ranges.MAX_DELAY_S, start_timeout_s=30.5),
        new_job(tenant, delay_s=0.123457),
        new_job(tenant, run_at=now - timedelta(days=3), start_timeout_s=60.0),  # past: now
        new_job(tenant, run_at=(now + timedelta(hours=1, microseconds=7)).astimezone(plus5)),
        new_job(tenant, run_at=datetime(1970, 1, 1, tzinfo=UTC)),
        # The latest run_at the edge takes is past what storage reads back unclamped.
        new_job(tenant, run_at=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
        new_job(
            tenant,
            run_at=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
            start_timeout_s=WEEK,
        ),
        new_job(tenant, concurrency_key="k" * ranges.MAX_CONCURRENCY_KEY_CHARS),
        new_job(tenant, concurrency_key="clé:🙂", model_route="fast", model="sim-fast"),
    ]


def key(i: int) -> IdempotencyClaim:
    return IdempotencyClaim(route="r", key=f"k{i}", body_hash="h", status_code=202, ttl_s=60)


async def by_single(storage: Storage, jobs: list[NewJob], now: datetime | None) -> list[Job]:
    return [(await submit_one(storage, job=job, now=now)).job for job in jobs]


async def by_keyed(storage: Storage, jobs: list[NewJob], now: datetime | None) -> list[Job]:
    outcomes = [
        await submit_one(storage, job=job, idempotency=key(i), now=now)
        for i, job in enumerate(jobs)
    ]
    assert not any(outcome.replayed for outcome in outcomes)
    return [outcome.job for outcome in outcomes]


async def by_many(storage: Storage, jobs: list[NewJob], now: datetime | None) -> list[Job]:
    return await insert_many(storage, jobs=jobs, now=now)


async def by_bulk(storage: Storage, jobs: list[NewJob], now: datetime | None) -> list[Job]:
    """Keyed and keyless items mixed in one call."""
    items = [BulkItem(job, key(i) if i % 2 else None) for i, job in enumerate(jobs)]
    results = await insert_bulk(storage, items=items, now=now)
    assert all(isinstance(r, SubmitOutcome) and not r.replayed for r in results)
    return [r.job for r in results if isinstance(r, SubmitOutcome)]


Insert = Callable[[Storage, list[NewJob], datetime | None], Awaitable[list[Job]]]


@pytest.mark.parametrize("insert", [by_single, by_keyed, by_many, by_bulk])
@pytest.mark.parametrize("fake_now", [True, False], ids=["given_now", "database_clock"])
async def test_an_insert_answers_what_job_get_reads(
    storage: Storage, clock: FakeClock, insert: Insert, fake_now: bool
) -> None:
    tenant = await make_tenant(storage)
    jobs = variety(tenant, clock.now())
    answered = await insert(storage, jobs, clock.now() if fake_now else None)
    assert [job.id for job in answered] == [job.id for job in jobs]
    for job in answered:
        assert job == await storage.job_get(job_id=job.id)
    assert answered[12].damaged == ("run_at",)  # clamped as job_get clamps it
    assert answered[13].damaged == ("run_at", "expires_at")
