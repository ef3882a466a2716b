"""Fixtures for the client tests: real `jobgate serve` processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.server import JobgateServer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobgateServer]:
    """One server (SQLite, temp config home) shared by a module's tests."""
    server = JobgateServer(tmp_path_factory.mktemp("served")).start()
    yield server
    server.stop()
