"""Messages that name no job, put on the broker by anyone with access to it (bytes that are not
UTF-8, a NUL, no job field, an empty body): acked, counted and logged once each, on every
transport and both stores. The worker never stops for them and the broker's lag falls to 0."""

from __future__ import annotations

import logging

import pytest

from jobgate import metrics
from jobgate.testing import eventually
from tests.transports.conftest import Cluster

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


def _count(counter: object, *labels: str) -> float:
    return float(counter.labels(*labels)._value.get())  # type: ignore[attr-defined]


async def test_garbage_on_the_broker_is_acked_and_counted_once(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    name = cluster.broker.name
    malformed = _count(metrics.TRANSPORT_RECEIVED, name, "malformed")
    garbage = await cluster.broker.publish_garbage()
    ids = await cluster.submit("acme", 5)
    with caplog.at_level(logging.WARNING, logger="jobgate.roles.intake"):
        await cluster.start_relay()
        await cluster.start_worker("w1")
        await cluster.wait_terminal(ids)
        await cluster.assert_each_succeeded_once(ids)
        await eventually(
            lambda: _count(metrics.TRANSPORT_RECEIVED, name, "malformed") - malformed == garbage,
            what="every malformed message counted",
        )
        # Gone from the broker: the relay reads a lag of 0 on a later pass.
        await eventually(lambda: _count(metrics.TRANSPORT_LAG, name) == 0, what="a lag of 0")
    logged = [r for r in caplog.records if "name no job" in r.getMessage()]
    assert sum(r.count for r in logged) == garbage  # type: ignore[attr-defined]
    assert _count(metrics.TRANSPORT_RECEIVED, name, "malformed") - malformed == garbage
