"""Races at the service level, on both backends: a cancel that arrives while the
reconciler checks a job, replies lost after a commit (accept, verdict), a worker that re-claims
the job it just requeued, and a host clock that disagrees with the database's.

Each test puts the other actor's write at the exact point of the race with FaultyStorage (a
hook after a call, or a reply lost after its commit) or a provider hook, on a fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from jobgate import errors
from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import CancelOutcome, Lease
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import RATE_LIMIT_MIN_WAIT_S, Finish
from jobgate.providers.background import ProviderJobRef, Snapshot
from jobgate.providers.registry import ProviderRegistry
from jobgate.roles.reconciler import Reconciler
from jobgate.roles.worker import Worker
from jobgate.services.limits import LimitsService
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.records import LimitOverrides, Tenant
from jobgate.testing import Fail, FakeClock, ScriptedProvider
from tests.roles.test_worker_background import DUE_S, Rig, make_rig
from tests.storage.helpers import finish_one, make_tenant, new_job, submit_one
from tests.support.clocked import ClockedStorage
from tests.support.faults import FaultyStorage
from tests.support.proxy import TcpProxy

HOST_AHEAD = timedelta(minutes=70)
# The end of a reply to asyncpg's fetchrow: PortalSuspended (one row read), then ReadyForQuery,
# idle: the implicit transaction committed before the server sent it.
POSTGRES_ROW_COMMITTED = b"s\x00\x00\x00\x04Z\x00\x00\x00\x05I"


@pytest.fixture
async def faulty(storage: Storage) -> FaultyStorage:
    return FaultyStorage(storage)


@pytest.fixture
async def tenant(storage: Storage) -> Tenant:
    return await make_tenant(storage)


@pytest.fixture
async def rig(faulty: FaultyStorage, clock: FakeClock, tenant: Tenant) -> AsyncIterator[Rig]:
    rig = make_rig(faulty, clock, tenant, max_attempts=3)
    rig.provider.idempotent_creates = False  # a second create is a second, billed job
    yield rig


# -- 1. a cancel during a reconciler check -----------------------------------------------------


async def test_cancel_during_a_check_that_finds_a_retryable_failure_is_not_recreated(
    rig: Rig, tenant: Tenant
) -> None:
    job = await rig.start(sim={"outcome": "failed"})  # fails at the provider, retryable
    retrieve = rig.provider.retrieve

    async def cancel_meanwhile(ref: ProviderJobRef) -> Snapshot:
        # The client cancels after the reconciler claimed the job without a cancel request.
        await rig.storage.job_cancel(job_id=job.id, tenant_id=tenant.id, actor="api")
        rig.provider.retrieve = retrieve  # type: ignore[method-assign]
        return await retrieve(ref)

    rig.provider.retrieve = cancel_meanwhile  # type: ignore[method-assign]
    await rig.sweep_at(DUE_S)
    settled = await rig.get(job.id)
    assert settled.state is JobState.CANCELLED  # not queued with a cancel request
    assert settled.cancel_outcome == CancelOutcome.INTERRUPTED
    rig.clock.advance(60)
    assert await rig.worker.run_once() == []  # nothing to claim: nothing created again
    assert rig.provider.creates == 1


# -- 2. replies lost after the commit ----------------------------------------------------------


async def test_a_lost_accept_reply_is_read_back_not_cancelled_at_the_provider(
    rig: Rig, faulty: FaultyStorage
) -> None:
    faulty.lose_reply("job_background_accept")
    job = await rig.start(sim={"latency_s": 10})
    assert faulty.lost == ["job_background_accept"]
    assert job.state is JobState.RUNNING and job.provider_job_id is not None
    assert job.cancel_requested_at is None
    assert rig.provider.engine.cancel_calls == []  # the worker kept its own provider job
    assert rig.worker.inflight == 0
    await rig.sweep_at(DUE_S)
    done = await rig.get(job.id)
    assert done.state is JobState.SUCCEEDED and done.cancel_outcome is None
    assert rig.provider.creates == 1


async def test_a_lost_accept_reply_on_the_wire_is_read_back(pg_dsn: str, clock: FakeClock) -> None:
    """The same race with a real connection reset: a TCP proxy between the worker's storage and
    PostgreSQL drops the end of the accept's reply, sent after the server committed it, and
    resets the connection."""
    url = urlsplit(pg_dsn)
    with TcpProxy((url.hostname or "127.0.0.1", url.port or 5432)) as proxy:
        userinfo = url.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@127.0.0.1:{proxy.port}" if userinfo else f"127.0.0.1:{proxy.port}"
        raw = postgres_store(urlunsplit(url._replace(netloc=netloc)), pool_size=2)
        await raw.open()
        try:
            faulty = FaultyStorage(raw)
            rig = make_rig(faulty, clock, await make_tenant(raw))
            rig.provider.idempotent_creates = False

            async def cut_the_accepts_reply() -> None:
                proxy.cut_reply(POSTGRES_ROW_COMMITTED)

            faulty.after("job_provider_submitting", cut_the_accepts_reply)
            job = await rig.start(sim={"latency_s": 10})
            assert proxy.replies_cut == 1
            assert job.state is JobState.RUNNING and job.creation_outcome == "accepted"
            assert rig.provider.engine.cancel_calls == []
            await rig.sweep_at(DUE_S)
            assert (await rig.get(job.id)).state is JobState.SUCCEEDED
            assert rig.provider.creates == 1
        finally:
            await raw.close()


async def test_a_lost_reply_to_marking_the_create_as_sending_does_not_doom_the_job(
    rig: Rig, faulty: FaultyStorage
) -> None:
    """Had the worker given up, the job would sit in `sending` with nothing sent, and the
    next worker would fail it as an unknown create (non-idempotent creates)."""
    faulty.lose_reply("job_provider_submitting")
    job = await rig.start(sim={"latency_s": 10})
    assert faulty.lost == ["job_provider_submitting"]
    assert job.state is JobState.RUNNING and job.creation_outcome == "accepted"
    await rig.sweep_at(DUE_S)
    assert (await rig.get(job.id)).state is JobState.SUCCEEDED
    assert rig.provider.creates == 1


async def test_an_accept_refused_by_the_fence_still_cancels_the_orphan(
    rig: Rig, faulty: FaultyStorage
) -> None:
    """The read-back does not hide a real loss: the reaper took the job meanwhile."""
    job = await rig.submit(sim={"latency_s": 10})

    async def reap() -> None:
        rig.clock.advance(rig.settings.lease_ttl_s + 1)
        await rig.storage.job_reap_expired(limit=10, retry_delay=lambda _: 0.0)

    faulty.after("job_provider_submitting", reap)
    await rig.worker.run_once()
    fresh = await rig.get(job.id)
    assert fresh.state is JobState.QUEUED and fresh.provider_job_id is None
    assert len(rig.provider.engine.cancel_calls) == 1  # ours was an orphan: cancelled


def _chat_worker(storage: Any, clock: FakeClock, provider: ScriptedProvider) -> Worker:
    settings = Settings(
        lease_ttl_s=60, heartbeat_interval_s=15, retry_base_s=0.01, retry_max_s=0.01
    )
    registry = ProviderRegistry(
        {"scripted": provider},
        configs={"scripted": ProviderConfig(kind="sim")},
        default="scripted",
        clock=clock,
    )
    return Worker(
        storage=ClockedStorage(storage, clock),
        providers=registry,
        settings=settings,
        clock=clock,
        worker_id="w1",
    )


async def test_a_lost_verdict_reply_is_read_back_not_logged_as_ignored(
    faulty: FaultyStorage, clock: FakeClock, tenant: Tenant
) -> None:
    job = new_job(tenant, provider="scripted")
    await submit_one(faulty, job=job, now=clock.now())
    faulty.lose_reply("job_finish_many")
    worker = _chat_worker(faulty, clock, ScriptedProvider())
    [done] = await worker.run_once()
    assert faulty.lost == ["job_finish_many"]
    assert done is not None and done.state is JobState.SUCCEEDED
    events = await faulty.job_events(job_id=job.id)
    assert [e.applied for e in events] == [True, True, True]  # no spurious "ignored" event


# -- 3. a worker that re-claims the job it just requeued ---------------------------------------


async def test_a_reclaimed_job_keeps_its_heartbeat(
    faulty: FaultyStorage, clock: FakeClock, tenant: Tenant
) -> None:
    job = new_job(tenant, provider="scripted")
    await submit_one(faulty, job=job, now=clock.now())
    provider = ScriptedProvider(script=[Fail(errors.ProviderRateLimited("429", retry_after_s=0))])
    worker = _chat_worker(faulty, clock, provider)
    reclaimed = []

    async def reclaim() -> None:  # the claim loop wins the race against execute()'s cleanup
        clock.advance(RATE_LIMIT_MIN_WAIT_S * 1.2 + 0.001)  # the shortest wait and its jitter
        reclaimed.extend(await worker.claim())

    faulty.after("job_finish_many", reclaim)
    [first] = await worker.claim()
    assert await worker.execute(first) is not None
    assert [j.id for j in reclaimed] == [job.id]
    second = reclaimed[0]
    assert second.lease_token != first.lease_token
    assert [lease.token for lease in worker.held_leases()] == [second.lease_token]
    clock.advance(30)
    await worker.heartbeat_once()
    renewed = await faulty.job_get(job_id=job.id)
    assert renewed is not None and renewed.lease_expires_at is not None
    assert renewed.lease_expires_at == clock.now() + timedelta(seconds=60)


# -- 4. the database's clock, not the host's ---------------------------------------------------


async def test_a_host_clock_ahead_does_not_fail_a_job_before_its_deadline(
    rig: Rig, clock: FakeClock
) -> None:
    job = await rig.start(sim={"latency_s": 10_000}, execution_timeout_s=3600)
    host = FakeClock(clock.now() + HOST_AHEAD)  # this host's clock is 70 minutes ahead
    skewed = Reconciler(
        storage=rig.storage, providers=rig.reconciler._providers, settings=rig.settings, clock=host
    )
    clock.advance(DUE_S)
    host.advance(DUE_S)
    await skewed.sweep_once()  # the time is the database's (the fake clock, on both backends)
    still = await rig.get(job.id)
    assert still.state is JobState.RUNNING, still.error
    assert rig.provider.engine.cancel_calls == []
    clock.advance(3600)  # past the deadline by the database's clock: now it is overdue
    await skewed.sweep_once()
    done = await rig.get(job.id)
    assert done.state is JobState.FAILED and done.error is not None
    assert done.error["code"] == "deadline_exceeded"


async def test_the_budget_day_is_the_databases(
    storage: Storage, clock: FakeClock, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    database_now = datetime(2030, 6, 1, 23, 30, tzinfo=UTC)

    async def database_clock() -> datetime:
        return database_now

    monkeypatch.setattr(storage, "database_now", database_clock)
    job = new_job(tenant)
    await submit_one(storage, job=job, now=database_now - timedelta(minutes=40))
    [claimed] = await storage.job_claim(
        worker_id="w", limit=1, lease_ttl_s=60, now=database_now - timedelta(minutes=31)
    )
    assert claimed.lease_token is not None
    await finish_one(
        storage,
        finish=Finish(
            lease=Lease(claimed.id, claimed.lease_token),
            state=JobState.SUCCEEDED,
            reason="completed",
            actor="w",
            result={"ok": True},
            usage={"input_tokens": 100, "output_tokens": 100},
        ),
        now=database_now - timedelta(minutes=30),
    )
    await storage.tenant_limits_set(
        tenant_id=tenant.id, overrides=LimitOverrides(daily_token_budget=150)
    )
    host = FakeClock(database_now + HOST_AHEAD)  # already tomorrow on this host
    limits = LimitsService(storage=storage, settings=Settings(), clock=host)
    policy = await limits.claim_policy()
    assert tenant.id in policy.blocked_tenants  # still today by the database: over budget
