"""The transport part of the Storage contract, on both backends: claims by id keep
the meaning of job_claim (caps, blocks, cancel, start deadlines, fencing), and the publication
ledger publishes each ready transition once, again after a move or past its republish time."""

from __future__ import annotations

import asyncio

import pytest

from jobgate.domain.job import Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish
from jobgate.storage.protocol import Storage
from jobgate.storage.records import ClaimPolicy, TenantShare
from jobgate.testing import FakeClock
from tests.storage.helpers import finish_one, make_tenant, new_job, release, submit_one

pytestmark = pytest.mark.asyncio


async def _jobs(
    storage: Storage, clock: FakeClock, name: str, count: int, **fields: object
) -> list[str]:
    tenant = await storage.tenant_get(name=name) or await make_tenant(storage, name)
    ids = []
    for _ in range(count):
        outcome = await submit_one(storage, job=new_job(tenant, **fields), now=clock.now())
        ids.append(outcome.job.id)
    return ids


async def _claim(storage: Storage, clock: FakeClock, ids: list[str], **kw: object):  # type: ignore[no-untyped-def]
    return await storage.job_claim_by_id(
        worker_id="w",
        job_ids=ids,
        lease_ttl_s=60,
        now=clock.now(),
        **kw,  # type: ignore[arg-type]
    )


async def test_claims_the_named_job_under_a_fresh_lease(storage: Storage, clock: FakeClock) -> None:
    first, second = await _jobs(storage, clock, "acme", 2)
    got = await _claim(storage, clock, [second])
    assert [job.id for job in got.claimed] == [second] and got.deferred == []
    job = got.claimed[0]
    assert job.state is JobState.RUNNING and job.lease_token and job.attempt == 1
    untouched = await storage.job_get(job_id=first)
    assert untouched is not None and untouched.state is JobState.QUEUED


async def test_a_duplicate_message_is_dropped(storage: Storage, clock: FakeClock) -> None:
    (job_id,) = await _jobs(storage, clock, "acme", 1)
    assert len((await _claim(storage, clock, [job_id, job_id])).claimed) == 1
    again = await _claim(storage, clock, [job_id])
    assert again.claimed == [] and again.deferred == []  # running under another lease: gone


async def test_concurrent_claims_of_one_id_lease_it_once(
    storage: Storage, clock: FakeClock
) -> None:
    ids = await _jobs(storage, clock, "acme", 20)
    results = await asyncio.gather(*(_claim(storage, clock, ids) for _ in range(4)))
    claimed = [job.id for result in results for job in result.claimed]
    assert sorted(claimed) == sorted(ids)


async def test_cancelled_expired_missing_and_finished_are_gone(
    storage: Storage, clock: FakeClock
) -> None:
    cancelled, late, done = await _jobs(storage, clock, "acme", 3)
    tenant = await storage.tenant_get(name="acme")
    assert tenant is not None
    await storage.job_cancel(job_id=cancelled, tenant_id=tenant.id, actor="t", now=clock.now())
    (finished,) = (await _claim(storage, clock, [done])).claimed
    assert finished.lease_token is not None
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(done, finished.lease_token),
            state=JobState.SUCCEEDED,
            reason="ok",
            result={},
            actor="w",
        ),
        now=clock.now(),
    )
    (deadline,) = await _jobs(storage, clock, "acme", 1, start_timeout_s=5)
    clock.advance(10)
    got = await _claim(storage, clock, [cancelled, done, "job_missing", deadline, late])
    assert [job.id for job in got.claimed] == [late]
    assert got.deferred == [deadline]  # still queued (the reaper expires it), never started


async def test_caps_and_blocks_defer(storage: Storage, clock: FakeClock) -> None:
    capped = await _jobs(storage, clock, "capped", 5)
    blocked = await _jobs(storage, clock, "blocked", 2)
    capped_tenant = await storage.tenant_get(name="capped")
    blocked_tenant = await storage.tenant_get(name="blocked")
    assert capped_tenant is not None and blocked_tenant is not None
    policy = ClaimPolicy(
        tenants={capped_tenant.id: TenantShare(max_running=2)},
        blocked_tenants=frozenset({blocked_tenant.id}),
    )
    got = await _claim(storage, clock, capped + blocked, policy=policy)
    assert [job.id for job in got.claimed] == capped[:2]  # the best first
    assert got.deferred == sorted(capped[2:] + blocked)
    again = await _claim(storage, clock, capped[2:], policy=policy)
    assert again.claimed == [] and again.deferred == sorted(capped[2:])
    # The cap counts running jobs from either kind of claim.
    more = await storage.job_claim(
        worker_id="w", limit=10, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    assert more == []


async def test_per_key_caps_defer(storage: Storage, clock: FakeClock) -> None:
    """max_running_per_key holds for claims by id as for job_claim, counting both kinds."""
    a = await _jobs(storage, clock, "keyed", 3, concurrency_key="a")
    b = await _jobs(storage, clock, "keyed", 2, concurrency_key="b")
    free = await _jobs(storage, clock, "keyed", 2)
    tenant = await storage.tenant_get(name="keyed")
    assert tenant is not None
    policy = ClaimPolicy(tenants={tenant.id: TenantShare(max_running_per_key=2)})
    got = await _claim(storage, clock, a[:1], policy=policy)
    assert [job.id for job in got.claimed] == a[:1]
    got = await _claim(storage, clock, a + b + free, policy=policy)
    # One more of key a (one runs already), both of b, and the jobs without a key.
    assert sorted(job.id for job in got.claimed) == sorted([a[1], *b, *free])
    assert got.deferred == [a[2]]
    # The cap counts running jobs from either kind of claim.
    more = await storage.job_claim(
        worker_id="w", limit=10, lease_ttl_s=60, policy=policy, now=clock.now()
    )
    assert more == []
    # The default share caps too, and concurrent claims never pass it.
    other = await _jobs(storage, clock, "other", 6, concurrency_key="k")
    capped = ClaimPolicy(default=TenantShare(max_running_per_key=1))
    results = await asyncio.gather(
        *(_claim(storage, clock, other, policy=capped) for _ in range(3))
    )
    assert len([job for result in results for job in result.claimed]) == 1


async def _retry_later(storage: Storage, clock: FakeClock, job_id: str) -> None:
    """Claim the job and send it back for a retry in 100 s (queued, not yet due)."""
    (job,) = (await _claim(storage, clock, [job_id])).claimed
    assert job.lease_token is not None
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job_id, job.lease_token),
            state=JobState.QUEUED,
            reason="retry",
            error={"code": "x"},
            retry_in_s=100,
            actor="w",
        ),
        now=clock.now(),
    )


async def test_not_due_is_deferred(storage: Storage, clock: FakeClock) -> None:
    (job_id,) = await _jobs(storage, clock, "acme", 1)
    await _retry_later(storage, clock, job_id)
    got = await _claim(storage, clock, [job_id])
    assert got.claimed == [] and got.deferred == [job_id]


async def test_each_ready_transition_is_published_once(storage: Storage, clock: FakeClock) -> None:
    ids = await _jobs(storage, clock, "acme", 3)
    (later,) = await _jobs(storage, clock, "acme", 1)
    await _retry_later(storage, clock, later)
    first = await storage.transport_publish_due(limit=10, republish_after_s=30, now=clock.now())
    assert sorted(p.job_id for p in first) == sorted(ids) and {
        p.published_count for p in first
    } == {1}
    assert (
        await storage.transport_publish_due(limit=10, republish_after_s=30, now=clock.now()) == []
    )
    # Claimed and sent back (a retry, a reclaim): a new transition, published again.
    (job,) = (await _claim(storage, clock, [ids[0]])).claimed
    assert job.lease_token is not None
    await release(
        storage, leases=[Lease(job.id, job.lease_token)], reason="shutdown", now=clock.now()
    )
    moved = await storage.transport_publish_due(limit=10, republish_after_s=30, now=clock.now())
    assert [(p.job_id, p.published_count) for p in moved] == [(ids[0], 1)]
    assert later not in {p.job_id for p in moved}
    clock.advance(101)  # the retry is due: published then
    due = await storage.transport_publish_due(limit=10, republish_after_s=300, now=clock.now())
    counts = {p.job_id: p.published_count for p in due}
    assert counts[later] == 1  # its first message; the others come again from the sweep
    assert {counts[job_id] for job_id in ids} == {2}


async def test_the_sweep_republishes_what_stays_unclaimed(
    storage: Storage, clock: FakeClock
) -> None:
    ids = await _jobs(storage, clock, "acme", 2)
    await storage.transport_publish_due(limit=10, republish_after_s=30, now=clock.now())
    await _claim(storage, clock, [ids[0]])
    clock.advance(31)
    swept = await storage.transport_publish_due(limit=10, republish_after_s=30, now=clock.now())
    assert [(p.job_id, p.published_count) for p in swept] == [(ids[1], 2)]


async def test_republishing_one_transition_backs_off(storage: Storage, clock: FakeClock) -> None:
    """The n-th republish of one transition waits republish_after_s * 2^(n-1), at most 16
    times; a new transition (a retry, a reclaim) starts again from republish_after_s."""
    (job_id,) = await _jobs(storage, clock, "acme", 1)
    await storage.transport_publish_due(limit=10, republish_after_s=10, now=clock.now())
    counts = []
    for wait in (10, 20, 40, 80, 160, 160, 160):
        clock.advance(wait - 0.5)
        assert (
            await storage.transport_publish_due(limit=10, republish_after_s=10, now=clock.now())
            == []
        ), f"republished before {wait} s"
        clock.advance(0.5)
        swept = await storage.transport_publish_due(limit=10, republish_after_s=10, now=clock.now())
        counts += [p.published_count for p in swept]
    assert counts == [2, 3, 4, 5, 6, 7, 8]

    (job,) = (await _claim(storage, clock, [job_id])).claimed
    assert job.lease_token is not None
    await release(
        storage, leases=[Lease(job.id, job.lease_token)], reason="shutdown", now=clock.now()
    )
    moved = await storage.transport_publish_due(limit=10, republish_after_s=10, now=clock.now())
    assert [(p.job_id, p.published_count) for p in moved] == [(job_id, 1)]
    clock.advance(10)
    again = await storage.transport_publish_due(limit=10, republish_after_s=10, now=clock.now())
    assert [(p.job_id, p.published_count) for p in again] == [(job_id, 2)]


async def test_with_the_sweep_held_only_new_transitions_are_published(
    storage: Storage, clock: FakeClock
) -> None:
    ids = await _jobs(storage, clock, "acme", 2)
    await storage.transport_publish_due(limit=10, republish_after_s=10, now=clock.now())
    (fresh,) = await _jobs(storage, clock, "acme", 1)
    clock.advance(11)  # the first two are due again, the new one never published
    held = await storage.transport_publish_due(
        limit=10, republish_after_s=10, now=clock.now(), sweep=False
    )
    assert [(p.job_id, p.published_count) for p in held] == [(fresh, 1)]
    swept = await storage.transport_publish_due(limit=10, republish_after_s=10, now=clock.now())
    assert sorted((p.job_id, p.published_count) for p in swept) == sorted(
        (job_id, 2) for job_id in ids
    )


async def test_defer_delays_the_next_publication(storage: Storage, clock: FakeClock) -> None:
    (job_id,) = await _jobs(storage, clock, "acme", 1)
    await storage.transport_publish_due(limit=10, republish_after_s=30, now=clock.now())
    await storage.transport_defer(job_ids=[job_id], delay_s=2, now=clock.now())
    clock.advance(1)
    assert (
        await storage.transport_publish_due(limit=10, republish_after_s=30, now=clock.now()) == []
    )
    clock.advance(1.5)
    again = await storage.transport_publish_due(limit=10, republish_after_s=30, now=clock.now())
    assert [p.job_id for p in again] == [job_id]


async def test_concurrent_relays_publish_once(storage: Storage, clock: FakeClock) -> None:
    ids = await _jobs(storage, clock, "acme", 30)
    batches = await asyncio.gather(
        *(
            storage.transport_publish_due(limit=100, republish_after_s=30, now=clock.now())
            for _ in range(4)
        )
    )
    published = [p.job_id for batch in batches for p in batch]
    assert sorted(published) == sorted(ids)


async def test_a_redrive_is_published_again(storage: Storage, clock: FakeClock) -> None:
    (job_id,) = await _jobs(storage, clock, "acme", 1)
    await storage.transport_publish_due(limit=10, republish_after_s=300, now=clock.now())
    (job,) = (await _claim(storage, clock, [job_id])).claimed
    assert job.lease_token is not None
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(job_id, job.lease_token),
            state=JobState.FAILED,
            reason="failed",
            error={"code": "x"},
            dead_lettered=True,
            actor="w",
        ),
        now=clock.now(),
    )
    assert (
        await storage.transport_publish_due(limit=10, republish_after_s=300, now=clock.now()) == []
    )
    tenant = await storage.tenant_get(name="acme")
    assert tenant is not None
    await storage.job_redrive(job_id=job_id, tenant_id=tenant.id, actor="op", now=clock.now())
    again = await storage.transport_publish_due(limit=10, republish_after_s=300, now=clock.now())
    assert [(p.job_id, p.published_count) for p in again] == [(job_id, 1)]


async def test_the_window_bounds_outstanding_messages(storage: Storage, clock: FakeClock) -> None:
    ids = await _jobs(storage, clock, "acme", 10)

    async def publish() -> list[str]:
        due = await storage.transport_publish_due(
            limit=100, republish_after_s=30, window=4, now=clock.now()
        )
        return [p.job_id for p in due]

    assert await publish() == ids[:4]
    assert await publish() == []
    await _claim(storage, clock, ids[:2])  # claimed: no longer outstanding
    assert await publish() == ids[4:6]


async def test_publication_follows_the_fair_share(storage: Storage, clock: FakeClock) -> None:
    flood = await _jobs(storage, clock, "flood", 30)
    clock.advance(1)
    small = await _jobs(storage, clock, "small", 3)
    await _claim(storage, clock, flood[:2])  # running work counts against the share too
    due = await storage.transport_publish_due(
        limit=100, republish_after_s=30, window=6, now=clock.now()
    )
    published = [p.job_id for p in due]
    assert set(small) <= set(published)  # older jobs do not win on age across tenants
    assert len(published) == 6
    heavy = await storage.tenant_get(name="flood")
    assert heavy is not None
    weighted = ClaimPolicy(tenants={heavy.id: TenantShare(weight=10)})
    more = await storage.transport_publish_due(
        limit=100, republish_after_s=30, window=12, policy=weighted, now=clock.now()
    )
    assert {p.job_id for p in more} <= set(flood)  # small has nothing left; flood's weight
    assert len(more) == 6
