"""The relay's sweep holds while the broker reports a backlog of at least the window (a broker
that holds that many messages is slow, not lossy: republishing would pile duplicates on it),
and resumes when the backlog falls below it; the gauge and the log say so."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pytest

from jobgate import metrics
from jobgate.config import Settings
from jobgate.roles.relay import Relay
from jobgate.wakeups import ChangeHub

pytestmark = pytest.mark.asyncio


class Backlogged:
    """A broker that reports whatever backlog the test sets."""

    name = "backlogged"

    def __init__(self) -> None:
        self.backlog = 0
        self.published: list[str] = []

    async def publish(self, job_ids: Sequence[str]) -> None:
        self.published += job_ids

    async def lag(self) -> int:
        return self.backlog


class Ledger:
    """The storage's side, recording whether each call asked for the sweep."""

    def __init__(self) -> None:
        self.changes = ChangeHub()
        self.sweeps: list[bool] = []

    async def transport_publish_due(self, **kwargs: Any) -> list[Any]:
        self.sweeps.append(kwargs["sweep"])
        return []


def _held() -> float:
    return float(metrics.TRANSPORT_SWEEP_HELD.labels("backlogged")._value.get())


async def test_the_sweep_holds_while_the_backlog_covers_the_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker, ledger = Backlogged(), Ledger()
    relay = Relay(
        storage=ledger,  # type: ignore[arg-type]
        transport=broker,  # type: ignore[arg-type]
        settings=Settings(transport_window=100),
    )
    await relay.relay_once()  # no backlog read yet: the sweep runs
    broker.backlog = 99
    await relay.read_lag()
    await relay.relay_once()
    assert ledger.sweeps == [True, True] and _held() == 0

    caplog.set_level(logging.INFO, logger="jobgate.roles.relay")
    broker.backlog = 100
    await relay.read_lag()
    await relay.relay_once()
    assert ledger.sweeps[-1] is False and relay.sweep_held() and _held() == 1
    assert "sweep held" in caplog.text
    assert metrics.TRANSPORT_LAG.labels("backlogged")._value.get() == 100

    broker.backlog = 5
    await relay.read_lag()
    await relay.relay_once()
    assert ledger.sweeps[-1] is True and not relay.sweep_held() and _held() == 0
    assert "sweep resumed" in caplog.text
