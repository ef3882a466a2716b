"""Fixtures for real-process tests: a process harness that always cleans up (and prints every
process's log tail when a test fails), PostgreSQL databases and a private cluster."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pluggy
import pytest

from jobgate.testing.receiver import WebhookReceiver
from tests.e2e import support
from tests.support import pgcluster
from tests.support.pgcluster import PrivateCluster
from tests.support.processes import ProcessHarness
from tests.support.proxy import TcpProxy
from tests.transports.brokers import Broker, open_broker

pytestmark = pytest.mark.e2e


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[_FAILED] = report.failed


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while support.OPEN_CLIENTS:
        support.OPEN_CLIENTS.pop().close()


@pytest.fixture
def harness(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcessHarness]:
    with ProcessHarness(tmp_path) as processes:
        yield processes
        if request.node.stash.get(_FAILED, False):
            print("\n" + processes.logs())


@pytest.fixture
def private_pg() -> Iterator[PrivateCluster]:
    """A throwaway PostgreSQL cluster that tests may crash and restart (never the shared one)."""
    if not pgcluster.available():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    with PrivateCluster() as cluster:
        yield cluster


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    """The user's webhook endpoint (answers 200, records every request)."""
    with WebhookReceiver() as running:
        yield running


@pytest.fixture
def proxies() -> Iterator[list[TcpProxy]]:
    """Proxies a test starts (append them); closed after the test."""
    started: list[TcpProxy] = []
    yield started
    for proxy in started:
        proxy.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Real processes on a shared CI machine: a longer budget than unit tests (deadlines inside
    # the tests are what fail them; this only catches a hang).
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(240))


@dataclasses.dataclass(frozen=True, slots=True)
class TransportUnderTest:
    name: str  # database | redis | amqp | sqs
    env: dict[str, str]  # what the jobgate processes need to use it
    broker: Broker | None  # None for `database`


@pytest.fixture(params=["database", "redis", "amqp", "sqs"])
async def transport(request: pytest.FixtureRequest) -> AsyncIterator[TransportUnderTest]:
    """The workers' JOBGATE_TRANSPORT: a scenario that takes this fixture (or
    `transport_env`) runs with the database claims and with each broker (a stream or queue of
    its own)."""
    if request.param == "database":
        yield TransportUnderTest("database", {}, None)
        return
    broker = open_broker(request.param)
    env = {
        "JOBGATE_TRANSPORT": broker.url(),
        "JOBGATE_TRANSPORT_SWEEP_AFTER_S": "3",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    yield TransportUnderTest(request.param, env, broker)
    await broker.cleanup()


@pytest.fixture
def transport_env(transport: TransportUnderTest) -> dict[str, str]:
    return transport.env
