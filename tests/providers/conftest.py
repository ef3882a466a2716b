"""A provider simulator server per test, on a free port of 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobgate.simulator.server import Simulator


@pytest.fixture
async def simulator() -> AsyncIterator[Simulator]:
    async with Simulator() as sim:
        yield sim
