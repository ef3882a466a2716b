"""The PauseStore part of the contract, on both backends: pauses are stored and listed, and
every claim (fair claims, claims by id, the relay's publications) skips exactly the queued jobs
a pause covers; a resume makes them claimable again with nothing lost or counted."""

from __future__ import annotations

import pytest

from jobgate.domain.states import JobState
from jobgate.storage.protocol import Storage
from jobgate.storage.records import Pause
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


async def _pause(storage: Storage, clock: FakeClock, pause_id: str, **scope: str | None) -> Pause:
    return await storage.pause_insert(
        pause_id=pause_id,
        provider=scope.get("provider"),
        model=scope.get("model"),
        tenant_id=scope.get("tenant_id"),
        reason=scope.get("reason"),
        created_by="ops",
        now=clock.now(),
    )


async def _jobs(storage: Storage, clock: FakeClock) -> dict[str, str]:
    """One job per (tenant, provider, model) of interest, by a short name."""
    acme = await make_tenant(storage, "acme")
    beta = await make_tenant(storage, "beta")
    shapes = {
        "acme-sim-echo": (acme, "sim", "sim-echo"),
        "acme-sim-slow": (acme, "sim", "sim-slow"),
        "acme-openai": (acme, "openai", "gpt-4o"),
        "beta-sim-echo": (beta, "sim", "sim-echo"),
    }
    ids = {}
    for name, (tenant, provider, model) in shapes.items():
        job = new_job(tenant, provider=provider, model=model)
        ids[name] = (await submit_one(storage, job=job, now=clock.now())).job.id
    return ids


async def _claimable(storage: Storage, clock: FakeClock, ids: dict[str, str]) -> set[str]:
    """The names of the jobs a claim takes now (their leases handed back: nothing is held)."""
    claimed = await storage.job_claim(worker_id="w", limit=100, lease_ttl_s=60, now=clock.now())
    names = {name for name, job_id in ids.items() if job_id in {job.id for job in claimed}}
    for job in claimed:
        assert job.lease_token is not None
    return names


async def test_a_pause_is_stored_listed_and_deleted(storage: Storage, clock: FakeClock) -> None:
    acme = await make_tenant(storage, "acme")
    first = await _pause(storage, clock, "pause_1", provider="sim", reason="maintenance")
    second = await _pause(storage, clock, "pause_2", tenant_id=acme.id, model="m")
    assert first.provider == "sim" and first.model is None and first.tenant_id is None
    assert first.reason == "maintenance" and first.created_by == "ops"
    assert first.created_at == clock.now()
    assert [p.id for p in await storage.pause_list()] == ["pause_1", "pause_2"]
    assert await storage.pause_delete(pause_id="pause_1") == [first]
    assert await storage.pause_delete(pause_id="pause_1") == []  # already gone
    assert await storage.pause_list() == [second]
    await _pause(storage, clock, "pause_3")
    assert {p.id for p in await storage.pause_delete(pause_id=None)} == {"pause_2", "pause_3"}
    assert await storage.pause_list() == []


@pytest.mark.parametrize(
    ("scope", "held"),
    [
        ({"provider": "sim"}, {"acme-sim-echo", "acme-sim-slow", "beta-sim-echo"}),
        ({"model": "sim-echo"}, {"acme-sim-echo", "beta-sim-echo"}),
        ({"tenant": "acme"}, {"acme-sim-echo", "acme-sim-slow", "acme-openai"}),
        ({"tenant": "acme", "provider": "sim", "model": "sim-slow"}, {"acme-sim-slow"}),
        ({"provider": "sim", "model": "gpt-4o"}, set()),  # both must match
        ({}, {"acme-sim-echo", "acme-sim-slow", "acme-openai", "beta-sim-echo"}),
    ],
)
async def test_claims_skip_exactly_what_a_pause_covers(
    storage: Storage, clock: FakeClock, scope: dict[str, str], held: set[str]
) -> None:
    ids = await _jobs(storage, clock)
    tenant_id = None
    if "tenant" in scope:
        tenant = await storage.tenant_get(name=scope["tenant"])
        assert tenant is not None
        tenant_id = tenant.id
    await _pause(
        storage,
        clock,
        "pause_1",
        provider=scope.get("provider"),
        model=scope.get("model"),
        tenant_id=tenant_id,
    )
    assert await _claimable(storage, clock, ids) == set(ids) - held
    by_id = await storage.job_claim_by_id(
        worker_id="w", job_ids=[ids[name] for name in held], lease_ttl_s=60, now=clock.now()
    )
    assert by_id.claimed == []
    assert sorted(by_id.deferred) == sorted(ids[name] for name in held)  # kept, not dropped


async def test_a_resume_makes_the_held_jobs_claimable_unchanged(
    storage: Storage, clock: FakeClock
) -> None:
    ids = await _jobs(storage, clock)
    await _pause(storage, clock, "pause_1", provider="sim")
    await _pause(storage, clock, "pause_2", provider="sim", model="sim-echo")
    assert await _claimable(storage, clock, ids) == {"acme-openai"}
    await storage.pause_delete(pause_id="pause_1")
    assert await _claimable(storage, clock, ids) == {"acme-sim-slow"}  # sim-echo still held
    await storage.pause_delete(pause_id="pause_2")
    assert await _claimable(storage, clock, ids) == {"acme-sim-echo", "beta-sim-echo"}
    for job_id in ids.values():
        job = await storage.job_get(job_id=job_id)
        assert job is not None and job.state is JobState.RUNNING
        assert job.attempt == 1 and job.run_count == 1  # waiting cost no attempt


async def test_the_relay_publishes_no_paused_job(storage: Storage, clock: FakeClock) -> None:
    ids = await _jobs(storage, clock)
    await _pause(storage, clock, "pause_1", provider="sim")
    published = await storage.transport_publish_due(
        limit=100, republish_after_s=30, now=clock.now()
    )
    assert {p.job_id for p in published} == {ids["acme-openai"]}
    await storage.pause_delete(pause_id=None)
    published = await storage.transport_publish_due(
        limit=100, republish_after_s=30, now=clock.now()
    )
    assert {p.job_id for p in published} == set(ids.values()) - {ids["acme-openai"]}
