"""The relay's window, over the real ledger: a publish the broker refused left no message, so
it holds no place in the window (the jobs are deferred, published again later), and the
publications that did reach the broker keep theirs until claimed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from jobgate.config import Settings
from jobgate.roles.relay import Relay
from jobgate.storage.protocol import Storage
from jobgate.testing import FakeClock
from jobgate.transports.base import TransportUnavailable
from tests.storage.helpers import make_tenant, new_job, submit_one

pytestmark = pytest.mark.asyncio


class Flaky:
    """A broker that refuses publishes while `down`."""

    name = "flaky"

    def __init__(self) -> None:
        self.down = False
        self.published: list[str] = []

    async def publish(self, job_ids: Sequence[str]) -> None:
        if self.down:
            raise TransportUnavailable("refused")
        self.published += job_ids

    async def lag(self) -> int:
        return len(self.published)


async def _jobs(storage: Storage, clock: FakeClock, name: str, count: int) -> list[str]:
    tenant = await make_tenant(storage, name)
    return [
        (await submit_one(storage, job=new_job(tenant), now=clock.now())).job.id
        for _ in range(count)
    ]


async def test_a_refused_publish_holds_no_place_in_the_window(
    storage: Storage, clock: FakeClock
) -> None:
    broker = Flaky()
    relay = Relay(
        storage=storage,
        transport=broker,  # type: ignore[arg-type]
        settings=Settings(transport_window=2, transport_defer_s=600),
    )
    refused = await _jobs(storage, clock, "first", 2)
    broker.down = True
    with pytest.raises(TransportUnavailable):
        await relay.relay_once()
    broker.down = False
    later = await _jobs(storage, clock, "second", 3)
    assert await relay.relay_once() == 2
    assert broker.published == later[:2]  # the window: the two that reached the broker
    assert await relay.relay_once() == 0
    assert not set(refused) & set(broker.published)  # deferred for transport_defer_s
