"""What the relay's window counts, on both backends: every publication of a queued job's current
transition whose message is still in the broker, due for the sweep or not; never a deferred
one (its message was consumed, or never reached the broker). The sweep replaces messages
already counted, so it passes a full window; a deferred job's new message waits for room in it,
and the sweep's hold does not stop it."""

from __future__ import annotations

import asyncio

import pytest

from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio

SWEEP_AFTER_S = 30


async def _jobs(storage: Storage, clock: FakeClock, name: str, count: int) -> list[str]:
    tenant = await storage.tenant_get(name=name) or await make_tenant(storage, name)
    ids = []
    for _ in range(count):
        outcome = await submit_one(storage, job=new_job(tenant), now=clock.now())
        ids.append(outcome.job.id)
    return ids


async def _publish(
    storage: Storage, clock: FakeClock, *, window: int, sweep: bool = True, limit: int = 100
) -> list[tuple[str, int]]:
    """One relay pass: (job id, published_count) of each publication answered, sorted."""
    due = await storage.transport_publish_due(
        limit=limit,
        republish_after_s=SWEEP_AFTER_S,
        window=window,
        now=clock.now(),
        sweep=sweep,
    )
    return sorted((p.job_id, p.published_count) for p in due)


async def _claim(storage: Storage, clock: FakeClock, ids: list[str]) -> None:
    got = await storage.job_claim_by_id(worker_id="w", job_ids=ids, lease_ttl_s=60, now=clock.now())
    assert sorted(job.id for job in got.claimed) == sorted(ids)


async def test_a_message_due_for_the_sweep_still_counts(storage: Storage, clock: FakeClock) -> None:
    """Past its republish time a message is most likely still in the broker: the window keeps
    counting it, so no new job is published in its place."""
    ids = await _jobs(storage, clock, "acme", 5)
    assert await _publish(storage, clock, window=3) == [(i, 1) for i in ids[:3]]
    clock.advance(SWEEP_AFTER_S + 1)
    assert await _publish(storage, clock, window=3, sweep=False) == []
    clock.advance(SWEEP_AFTER_S * 10)  # however long it waits
    assert await _publish(storage, clock, window=3, sweep=False) == []


async def test_a_window_full_of_lost_messages_is_still_swept(
    storage: Storage, clock: FakeClock
) -> None:
    """The sweep replaces messages the window already counts: a full window does not stop it,
    it adds no new job, and it stays within the batch limit."""
    ids = await _jobs(storage, clock, "acme", 5)
    await _publish(storage, clock, window=3)
    clock.advance(SWEEP_AFTER_S)
    assert await _publish(storage, clock, window=3, limit=2) == [(i, 2) for i in ids[:2]]
    assert await _publish(storage, clock, window=3) == [(ids[2], 2)]
    assert await _publish(storage, clock, window=3) == []  # swept ones count as before
    await _claim(storage, clock, ids[:1])  # room for one new job
    assert await _publish(storage, clock, window=3) == [(ids[3], 1)]


async def test_a_sweep_and_new_jobs_share_one_pass(storage: Storage, clock: FakeClock) -> None:
    ids = await _jobs(storage, clock, "acme", 4)
    await _publish(storage, clock, window=2)
    await _claim(storage, clock, ids[:1])
    clock.advance(SWEEP_AFTER_S)
    # ids[1] is swept (already counted); one place is free, taken by the best new job.
    assert await _publish(storage, clock, window=2) == [(ids[1], 2), (ids[2], 1)]


async def test_deferred_publications_do_not_hold_the_window(
    storage: Storage, clock: FakeClock
) -> None:
    """A capped tenant's deferred jobs have no message in the broker: another tenant's new
    jobs get their places."""
    capped = await _jobs(storage, clock, "capped", 3)
    assert await _publish(storage, clock, window=3) == [(i, 1) for i in capped]
    await storage.transport_defer(job_ids=capped, delay_s=60, now=clock.now())
    other = await _jobs(storage, clock, "other", 4)
    assert await _publish(storage, clock, window=3) == [(i, 1) for i in other[:3]]


async def test_a_deferred_job_is_published_again_while_the_sweep_holds(
    storage: Storage, clock: FakeClock
) -> None:
    """The hold stops republishing messages that may still wait in the broker; a deferred job
    has none, so its delay alone decides."""
    (job_id,) = await _jobs(storage, clock, "acme", 1)
    await _publish(storage, clock, window=3)
    await storage.transport_defer(job_ids=[job_id], delay_s=2, now=clock.now())
    clock.advance(1)
    assert await _publish(storage, clock, window=3, sweep=False) == []
    clock.advance(1)
    assert await _publish(storage, clock, window=3, sweep=False) == [(job_id, 2)]
    # Published again, it has a message: not deferred any more, and not due again before
    # its republish time.
    assert await _publish(storage, clock, window=3, sweep=False) == []
    clock.advance(SWEEP_AFTER_S * 4)
    assert await _publish(storage, clock, window=3, sweep=False) == []
    assert await _publish(storage, clock, window=3) == [(job_id, 3)]


async def test_a_deferred_jobs_new_message_waits_for_room_in_the_window(
    storage: Storage, clock: FakeClock
) -> None:
    (deferred,) = await _jobs(storage, clock, "capped", 1)
    await _publish(storage, clock, window=1)
    await storage.transport_defer(job_ids=[deferred], delay_s=2, now=clock.now())
    (other,) = await _jobs(storage, clock, "other", 1)
    assert await _publish(storage, clock, window=1) == [(other, 1)]
    clock.advance(2)
    assert await _publish(storage, clock, window=1) == []  # the window is full
    await _claim(storage, clock, [other])
    assert await _publish(storage, clock, window=1) == [(deferred, 2)]
    # Its message counts again: no room for a new job.
    (late,) = await _jobs(storage, clock, "other", 1)
    assert await _publish(storage, clock, window=1) == []
    await _claim(storage, clock, [deferred])
    assert await _publish(storage, clock, window=1) == [(late, 1)]


async def test_concurrent_relays_answer_each_publication_once(
    storage: Storage, clock: FakeClock
) -> None:
    """Sweeps, deferred jobs and new jobs alike: each publication goes to one relay."""
    lost = await _jobs(storage, clock, "acme", 10)
    deferred = await _jobs(storage, clock, "acme", 10)
    await _publish(storage, clock, window=100)
    await storage.transport_defer(job_ids=deferred, delay_s=1, now=clock.now())
    fresh = await _jobs(storage, clock, "acme", 10)
    clock.advance(SWEEP_AFTER_S)
    batches = await asyncio.gather(*(_publish(storage, clock, window=100) for _ in range(4)))
    answered = sorted(p for batch in batches for p in batch)
    assert answered == sorted([(i, 2) for i in lost + deferred] + [(i, 1) for i in fresh])
