"""Fixtures shared by every tier: a fake clock, and storage on both backends.

PostgreSQL tests run against JOBGATE_TEST_DATABASE_URL (default: the local `test` database),
each on its own database cloned from a migrated template. They skip when the server is not
reachable, unless JOBGATE_TEST_REQUIRE_POSTGRES=1 (CI), which makes that a failure. The
`postgres-pgbouncer` backend reaches the same clones through a private PgBouncer in transaction
mode (tests.support.pgbouncer); without `pgbouncer` installed it skips, unless
JOBGATE_TEST_REQUIRE_PGBOUNCER=1 (CI).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jobgate.config import ProviderConfig, Settings
from jobgate.process.runtime import Runtime
from jobgate.providers.registry import ProviderRegistry
from jobgate.providers.simulated import SimProvider
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.testing import FakeClock, ScriptedProvider, SequentialIds
from tests.api_server import api  # noqa: F401  (the `api` fixture, for every folder)
from tests.support import pgbouncer
from tests.support.databases import PostgresTemplate, admin_dsn, postgres_available

T = TypeVar("T")
REQUIRE_POSTGRES = os.environ.get("JOBGATE_TEST_REQUIRE_POSTGRES") == "1"
REQUIRE_PGBOUNCER = os.environ.get("JOBGATE_TEST_REQUIRE_PGBOUNCER") == "1"
_postgres_tests_run = 0
_templates: list[PostgresTemplate] = []  # dropped at the session's end


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even inside a running loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[PostgresTemplate]:
    if not run_sync(postgres_available()):
        message = "PostgreSQL is not reachable (JOBGATE_TEST_DATABASE_URL)"
        if REQUIRE_POSTGRES:
            pytest.fail(message + " and JOBGATE_TEST_REQUIRE_POSTGRES=1")
        pytest.skip(message)
    template = PostgresTemplate(ahead=2)
    _templates.append(template)
    run_sync(template.create())
    yield template
    # Dropped in pytest_sessionfinish, not here: a session fixture's teardown runs inside the
    # last test's teardown, under its 60 s timeout, and dropping the clones still queued
    # (each DROP DATABASE checkpoints) outlasted it on a loaded machine.


@pytest.fixture(scope="session")
def pg_bouncer(pg_template: PostgresTemplate) -> Iterator[pgbouncer.PgBouncer]:
    """One PgBouncer in transaction mode in front of the test server, for the session."""
    if not pgbouncer.available():
        message = "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
        if REQUIRE_PGBOUNCER:
            pytest.fail(message + " and JOBGATE_TEST_REQUIRE_PGBOUNCER=1")
        pytest.skip(message)
    with pgbouncer.PgBouncer(upstream=admin_dsn()) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite database, made once per test process: the `storage` fixture gives each
    test a copy of it (a copy costs a few milliseconds, migrating a new file 0.15-0.25 s)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "jobgate.db"

    async def migrated() -> None:
        store = sqlite_store(str(path))
        await store.open()
        await store.migrate()
        await store.close()

    run_sync(migrated())
    return path


def copy_sqlite(source: Path, target: Path) -> None:
    """Copy a closed SQLite database with SQLite's backup API (whatever its journal holds)."""
    with contextlib.closing(sqlite3.connect(source)) as src:
        with contextlib.closing(sqlite3.connect(target)) as dst:
            src.backup(dst)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return _backend(request)


def _backend(request: pytest.FixtureRequest) -> str:
    """The backend a parametrized `backend` fixture names, its servers started."""
    if request.param.startswith("postgres"):
        request.getfixturevalue("pg_template")
    if request.param == "postgres-pgbouncer":
        request.getfixturevalue("pg_bouncer")
    return str(request.param)


@pytest.fixture
def clock() -> FakeClock:
    # Starts at the real time, so PostgreSQL's own clock (used where `now` is not passed)
    # agrees with it to within the test's duration.
    from jobgate.clock import SystemClock

    real = SystemClock().now()
    return FakeClock(datetime.fromtimestamp(int(real.timestamp()), UTC))


@pytest.fixture
async def storage(
    backend: str, clock: FakeClock, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Storage]:
    if backend == "sqlite":
        copy_sqlite(request.getfixturevalue("sqlite_template"), tmp_path / "jobgate.db")
        store: Storage = sqlite_store(str(tmp_path / "jobgate.db"), clock=clock)
        await store.open()
        await store.migrate()  # nothing left to apply: as every start of jobgate does
        yield store
        await store.close()
        return
    template: PostgresTemplate = request.getfixturevalue("pg_template")
    dsn = await template.clone()
    if backend == "postgres-pgbouncer":  # every call through the pooler, LISTEN direct
        bouncer: pgbouncer.PgBouncer = request.getfixturevalue("pg_bouncer")
        store = postgres_store(bouncer.dsn_for(dsn), pool_size=4, listen_dsn=dsn)
    else:
        store = postgres_store(dsn, pool_size=4)
    await store.open()
    yield store
    await store.close()
    await template.drop_clone(dsn)


@pytest.fixture
async def pg_dsn(pg_template: PostgresTemplate) -> AsyncIterator[str]:
    """A fresh migrated PostgreSQL database for tests that start their own processes."""
    global _postgres_tests_run
    _postgres_tests_run += 1
    dsn = await pg_template.clone()
    yield dsn
    await pg_template.drop_clone(dsn)


@pytest.fixture
def scripted() -> ScriptedProvider:
    return ScriptedProvider("scripted")


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url="sqlite:///unused.db",
        lease_ttl_s=60,
        heartbeat_interval_s=15,
        retry_base_s=0.05,
        retry_max_s=0.05,
        max_attempts=3,
        shutdown_grace_s=0,
    )


@pytest.fixture
def runtime(
    storage: Storage, settings: Settings, clock: FakeClock, scripted: ScriptedProvider
) -> Runtime:
    registry = ProviderRegistry(
        {"sim": SimProvider("sim", clock=clock), "scripted": scripted},
        configs={
            "sim": ProviderConfig(kind="sim", model_prefixes=("sim-",)),
            "scripted": ProviderConfig(kind="sim"),
        },
        default="sim",
    )
    return Runtime(settings, storage=storage, clock=clock, ids=SequentialIds(), providers=registry)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count the PostgreSQL tests that ran. A report reaches this hook in the process that runs
    pytest's summary: with pytest-xdist, the controller, which runs no test itself."""
    global _postgres_tests_run
    if report.when == "call" and report.passed and "postgres" in report.keywords:
        _postgres_tests_run += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    while _templates:
        run_sync(_templates.pop().drop())
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: the controller judges
        return
    if REQUIRE_POSTGRES and _postgres_tests_run == 0 and session.testscollected:
        print("\nJOBGATE_TEST_REQUIRE_POSTGRES=1 but no PostgreSQL test ran", flush=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
