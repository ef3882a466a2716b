"""Shared rate limits behind a broker transport, on both backends and
the real Redis: a rate-limited provider is never published, a stray message for it is not
claimed by id, and its jobs start from the table one request at a time, never faster than the
limit; the other providers still come through the broker. SQLite runs on the fake clock;
PostgreSQL on its own clock (steps of 0.1 s), as in tests/services/test_rate_limited_workers."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobgate.config import ProviderConfig, Settings
from jobgate.domain.job import Job
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.roles.relay import Relay
from jobgate.roles.worker import Worker
from jobgate.services import rate_limits
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from tests.services.test_rate_limited_workers import most_in_window, step
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.support.faults import FaultyStorage
from tests.transports.brokers import Broker, open_broker

pytestmark = pytest.mark.asyncio


@pytest.fixture
async def redis_broker() -> AsyncIterator[Broker]:
    made = open_broker("redis")
    yield made
    await made.cleanup()


def two_providers(clock: FakeClock) -> ProviderRegistry:
    """`sim` at 120 requests a minute (one start every 0.5 s), `fast` unlimited."""
    return ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), "fast": SimProvider("fast", clock=clock)},
        configs={
            "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",), rpm=120),
            "fast": ProviderConfig(kind="sim", model_prefixes=("fast-",)),
        },
        default="sim",
    )


async def test_a_rate_limited_provider_behind_redis_keeps_its_rpm(
    storage: Storage, clock: FakeClock, settings: Settings, redis_broker: Broker
) -> None:
    settings = settings.model_copy(update={"worker_poll_interval_s": 0.05})
    tenant = await make_tenant(storage)
    limited = [
        (await submit_one(storage, job=new_job(tenant), now=clock.now())).job.id for _ in range(4)
    ]
    fast = (
        await submit_one(
            storage, job=new_job(tenant, provider="fast", model="fast-echo"), now=clock.now()
        )
    ).job.id
    providers = two_providers(clock)
    relay_transport = redis_broker.transport("relay", claim_idle_s=60)
    worker_transport = redis_broker.transport("w", claim_idle_s=60)
    await relay_transport.open()
    await worker_transport.open()
    relay = Relay(
        storage=storage,
        transport=relay_transport,
        settings=settings,
        skip_providers=rate_limits.limited_providers(providers.configs()),
    )
    assert rate_limits.limited_providers(providers.configs()) == {"sim"}
    # Only the unlimited provider's job is published.
    assert await relay.relay_once() == 1
    # Stray messages for the limited jobs (published before the limit was configured): the
    # intake must not claim them by id past the buckets.
    await relay_transport.publish(limited)
    worker = Worker(
        storage=storage,
        providers=providers,
        settings=settings,
        clock=clock,
        worker_id="w",
        transport=worker_transport,
    )
    claimed: list[Job] = []
    for _ in range(40):
        claimed += await worker.claim()
        if len(claimed) == 5:
            break
        await step(storage, clock)
    assert sorted(job.id for job in claimed) == sorted([*limited, fast])
    started = [job.started_at for job in claimed if job.provider == "sim" and job.started_at]
    # Two a second, +1 for a start on the window's edge; never all four at once.
    assert len(started) == 4 and most_in_window(started, 1.0) <= 3
    # The stray messages were deferred, not claimed, and are never published again.
    clock.advance(3600)
    assert await relay.relay_once() == 0
    await relay_transport.close()
    await worker_transport.close()


async def test_jobs_claimed_by_id_reach_the_worker_when_a_later_claim_fails(
    storage: Storage, clock: FakeClock, settings: Settings, redis_broker: Broker
) -> None:
    """One pass claims by id from the broker, then claims a rate-limited provider's jobs from
    the table; the database fails the second claim. The jobs of the first must still reach
    the worker: dropped, they would run nowhere until the reaper took their leases back, and
    their messages would be held by nobody (a RabbitMQ consumer's credit, for good)."""
    tenant = await make_tenant(storage)
    fast = (
        await submit_one(
            storage, job=new_job(tenant, provider="fast", model="fast-echo"), now=clock.now()
        )
    ).job.id
    providers = two_providers(clock)
    relay_transport = redis_broker.transport("relay", claim_idle_s=60)
    worker_transport = redis_broker.transport("w", claim_idle_s=60)
    await relay_transport.open()
    await worker_transport.open()
    relay = Relay(
        storage=storage,
        transport=relay_transport,
        settings=settings,
        skip_providers=rate_limits.limited_providers(providers.configs()),
    )
    assert await relay.relay_once() == 1
    faulty = FaultyStorage(storage)
    worker = Worker(
        storage=faulty,
        providers=providers,
        settings=settings,
        clock=clock,
        worker_id="w",
        transport=worker_transport,
    )
    faulty.fail("job_claim")  # the rate-limited provider's claim, after the claim by id
    claimed = await worker.claim()
    assert [job.id for job in claimed] == [fast]
    assert worker.inflight == 1
    await relay_transport.close()
    await worker_transport.close()
