"""What the console reads: recent transitions with queue waits, queue depth by
tenant and provider, and job search, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest

from jobgate import errors
from jobgate.domain.bulk import JobFilter
from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.postgres.store import is_postgres
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import is_sqlite
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def test_transitions_since_carry_the_wait_and_the_cap_keeps_the_newest(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    old = await submit_one(storage, job=new_job(acme), now=clock.now())
    clock.advance(600)
    since = clock.now()
    job = (await submit_one(storage, job=new_job(acme, provider="scripted"), now=clock.now())).job
    clock.advance(30)
    claimed = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    assert [c.id for c in claimed] == [old.job.id]  # the older job is claimed first
    clock.advance(5)
    [second] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    clock.advance(2)
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job.id, second.lease_token or ""),
            state=JobState.SUCCEEDED,
            reason="completed",
        ),
        now=clock.now(),
    )

    seen = await storage.console_transitions(since=since, limit=100)
    # Newest first; the old job's creation (before `since`) is not read, its claim is.
    assert [(t.job_id, t.to_state) for t in seen] == [
        (job.id, JobState.SUCCEEDED),
        (job.id, JobState.RUNNING),
        (old.job.id, JobState.RUNNING),
        (job.id, JobState.QUEUED),
    ]
    by_claim = {t.job_id: t for t in seen if t.to_state is JobState.RUNNING}
    assert by_claim[job.id].tenant_id == acme.id and by_claim[job.id].provider == "scripted"
    assert by_claim[job.id].queued_at == since
    assert (by_claim[job.id].at - since).total_seconds() == 35
    assert by_claim[old.job.id].queued_at == since - timedelta(seconds=600)
    assert seen[0].from_state is JobState.RUNNING and seen[-1].from_state is None

    capped = await storage.console_transitions(since=since, limit=2)
    assert [(t.job_id, t.to_state) for t in capped] == [
        (job.id, JobState.SUCCEEDED),
        (job.id, JobState.RUNNING),
    ]


async def test_queue_depth_by_tenant_and_provider(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    for tenant, provider in [(acme, "sim"), (acme, "sim"), (acme, "scripted"), (beta, "sim")]:
        await submit_one(storage, job=new_job(tenant, provider=provider), now=clock.now())
    await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    depth = {(d.tenant_id, d.provider): d.queued for d in await storage.console_queue_depth()}
    assert sum(depth.values()) == 3
    assert depth[(beta.id, "sim")] == 1 and depth[(acme.id, "scripted")] == 1


async def test_search_by_id_provider_job_id_metadata_and_filter(
    storage: Storage, clock: FakeClock
) -> None:
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    tagged = await submit_one(
        storage, job=new_job(acme, metadata={"customer": "c-42", "run": "7"}), now=clock.now()
    )
    clock.advance(1)
    other = await submit_one(
        storage, job=new_job(acme, metadata={"customer": "c-43"}), now=clock.now()
    )
    clock.advance(1)
    theirs = await submit_one(
        storage,
        job=new_job(beta, metadata={"customer": "c-42"}, model="sim-other"),
        now=clock.now(),
    )
    [running] = await storage.job_claim(worker_id="w", limit=1, lease_ttl_s=60, now=clock.now())
    lease = Lease(running.id, running.lease_token or "")
    await storage.job_provider_submitting(lease=lease, now=clock.now())
    await storage.job_background_accept(
        lease=lease,
        provider_job_id="batch_abc",
        provider_status="queued",
        reconcile_in_s=30,
        now=clock.now(),
    )

    def ids(jobs: list) -> list[str]:  # type: ignore[type-arg]
        return [j.id for j in jobs]

    search = storage.console_job_search
    assert ids(await search(where=JobFilter(), job_id=other.job.id)) == [other.job.id]
    assert await search(where=JobFilter(), job_id="job_nope") == []
    assert ids(await search(where=JobFilter(), provider_job_id="batch_abc")) == [running.id]
    assert await search(where=JobFilter(), provider_job_id="batch_x") == []
    customer = JobFilter(metadata={"customer": "c-42"})
    assert ids(await search(where=customer)) == [theirs.job.id, tagged.job.id]  # newest first
    both = JobFilter(metadata={"customer": "c-42", "run": "7"})
    assert ids(await search(where=both)) == [tagged.job.id]
    assert await search(where=JobFilter(metadata={"run": "8"})) == []
    scoped = JobFilter(tenant_id=beta.id, model="sim-other", states=(JobState.QUEUED,))
    assert ids(await search(where=scoped)) == [theirs.job.id]
    everyone = await search(where=JobFilter(), limit=2)
    assert ids(everyone) == [theirs.job.id, other.job.id]
    rest = await search(where=JobFilter(), after=everyone[-1].id, limit=2)
    assert ids(rest) == [tagged.job.id]
    with pytest.raises(errors.InvalidRequest):
        await search(where=JobFilter(), after="job_unknown")


async def test_the_charts_read_and_the_id_search_use_their_indexes(
    storage: Storage, clock: FakeClock
) -> None:
    """The hour's read is a range of job_events_by_time, never a scan of every event (on
    PostgreSQL, its first events implied by the job rows: test_implied_first_events_postgres);
    the provider's id is found through jobs_by_provider_job_id (migration 0016)."""
    since = clock.now()
    if is_sqlite(storage):
        from jobgate.storage.sqlite.executor import Q

        async def explain_sqlite(name: str, params: dict[str, object]) -> str:
            return str(
                await storage.engine.database.read(
                    lambda conn: " ".join(
                        str(tuple(r))
                        for r in conn.execute("EXPLAIN QUERY PLAN " + Q[name].sql, params)
                    )
                )
            )

        transitions = await explain_sqlite(
            "console_transitions", {"since": since.timestamp(), "limit": 10}
        )
        by_provider = await explain_sqlite(
            "console_job_by_provider_job_id", {"provider_job_id": "x", "limit": 10}
        )
    else:
        assert is_postgres(storage)
        from jobgate.storage.postgres.executor import Q as PQ

        async def explain_postgres(name: str, *args: object) -> str:
            async def run(conn: Any) -> str:
                await conn.execute("SET enable_seqscan = off")
                try:
                    rows = await conn.fetch("EXPLAIN " + PQ[name].positional_sql, *args)
                finally:
                    await conn.execute("RESET enable_seqscan")
                return " ".join(row[0] for row in rows)

            return str(await storage.engine.executor.run(run))

        transitions = await explain_postgres("console_transitions", since, 10)
        by_provider = await explain_postgres("console_job_by_provider_job_id", "x", 10)
    # On PostgreSQL job_events is partitioned by day (migration 0088): the read goes through
    # each partition's index of job_events_by_time (named after the partition).
    assert re.search(
        r"job_events_(by_time|p\d{8}_created_at_idx|default_created_at_idx)", transitions
    )
    assert "jobs_by_provider_job_id" in by_provider
