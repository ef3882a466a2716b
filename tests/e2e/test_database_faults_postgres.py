"""PostgreSQL going away under load: a crash restart of a private cluster, backends terminated
on the shared one (only this test's database), and a TCP proxy that delays, blackholes and
resets the database link. The API answers 503 meanwhile and recovers by itself; no accepted job
is lost or completed twice. The crash restart and the terminated backends run with every
transport (the `transport_env` fixture of tests/e2e/conftest.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import asyncpg
import httpx
import pytest

from tests.e2e.support import (
    Api,
    Load,
    assert_completed_once,
    create_tenant,
    job_body,
    wait_settled,
    wait_state,
)
from tests.support import audit
from tests.support.pgcluster import PrivateCluster
from tests.support.processes import ProcessHarness, wait_until
from tests.support.proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _start_roles(harness: ProcessHarness, dsn: str, *roles: str) -> str:
    harness.env["JOBGATE_DATABASE_URL"] = dsn
    processes = [harness.start(role, ready=False) for role in roles]
    for process in processes:
        process.wait_ready()
    url = next(p.url for p in processes if p.url is not None)
    return url


def _wait_for_status(url: str, key: str, wanted: int, *, timeout_s: float = 60) -> None:
    def answered() -> bool:
        try:
            response = httpx.post(
                f"{url}/v1/jobs",
                json=job_body("probe"),
                headers={"Authorization": f"Bearer {key}"},
                timeout=15,
            )
        except httpx.TransportError:
            return False
        if response.status_code == 503:
            assert response.headers["Retry-After"]
            assert response.json()["error"]["code"] == "storage_unavailable"
        return response.status_code == wanted

    wait_until(answered, timeout_s=timeout_s, interval_s=0.1, what=f"the API to answer {wanted}")


def test_postgres_crash_restart_during_load_api_503_then_recovers(
    harness: ProcessHarness, private_pg: PrivateCluster, transport_env: dict[str, str]
) -> None:
    """With each transport: the relay and the intake ride through the restart."""
    dsn = private_pg.create_database("jobgate")
    harness.env.update(transport_env)
    url = _start_roles(harness, dsn, "api", "worker", "reaper")
    key = create_tenant(dsn, "acme")
    with Load(url, key) as load:
        wait_until(lambda: len(load.accepted) >= 10, what="some accepted jobs")
        private_pg.stop(mode="immediate")  # the crash
        _wait_for_status(url, key, 503)  # the API says so while the database is down
        private_pg.start()  # crash recovery replays the WAL
        _wait_for_status(url, key, 202)
        private_pg.restart(mode="immediate")  # and the one-step crash restart, under load
        _wait_for_status(url, key, 202)
        before = len(load.accepted)
        wait_until(lambda: len(load.accepted) >= before + 10, what="submits after recovery")
    unexpected = {s for s in load.statuses if s not in (202, 503)}
    assert not unexpected, load.statuses
    # Every job that got a 202 ran to completion exactly once (jobs whose 503 hid a commit
    # may exist too: they must be complete and single as well).
    facts = wait_settled(dsn, list(audit.job_facts(dsn)), timeout_s=120)
    assert set(load.accepted) <= set(facts)
    assert_completed_once(facts)


def test_pg_terminate_backend_during_load_recovers_postgres(
    harness: ProcessHarness, pg_dsn: str, transport_env: dict[str, str]
) -> None:
    harness.env.update(transport_env)
    url = _start_roles(harness, pg_dsn, "api", "worker", "reaper")
    key = create_tenant(pg_dsn, "acme")
    database = pg_dsn.rsplit("/", 1)[1]

    async def terminate_all() -> int:
        conn = await asyncpg.connect(pg_dsn)
        try:
            # Only this test's database: other suites share the server.
            return int(
                await conn.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = $1 AND pid <> pg_backend_pid()",
                    database,
                )
            )
        finally:
            await conn.close()

    with Load(url, key, interval_s=0.02) as load:
        wait_until(lambda: len(load.accepted) >= 10, what="some accepted jobs")
        killed = 0
        for _ in range(5):
            killed += asyncio.run(terminate_all())
            time.sleep(0.3)
        before = len(load.accepted)
        wait_until(lambda: len(load.accepted) >= before + 20, what="submits after the kills")
    assert killed >= 5
    assert {s for s in load.statuses if s not in (202, 503)} == set(), load.statuses
    facts = wait_settled(pg_dsn, list(audit.job_facts(pg_dsn)), timeout_s=120)
    assert set(load.accepted) <= set(facts)
    assert_completed_once(facts)


def _pg_address(dsn: str) -> tuple[str, int]:
    hostport = dsn.split("@", 1)[1].split("/", 1)[0]
    host, _, port = hostport.partition(":")
    return host, int(port or 5432)


def _via(dsn: str, proxy: TcpProxy) -> str:
    host, port = _pg_address(dsn)
    return dsn.replace(f"@{host}:{port}/", f"@127.0.0.1:{proxy.port}/")


def test_heartbeat_that_cannot_reach_the_database_stops_work_before_lease_expiry_postgres(
    harness: ProcessHarness, pg_dsn: str
) -> None:
    url = _start_roles(harness, pg_dsn, "api", "reaper")
    api = Api(url, create_tenant(pg_dsn, "acme"))
    with TcpProxy(_pg_address(pg_dsn)) as proxy:
        cut_off = harness.start("worker", env={"JOBGATE_DATABASE_URL": _via(pg_dsn, proxy)})
        job_id = api.submit(job_body("cut off", latency_s=5))
        wait_state(pg_dsn, job_id, ["running"])
        time.sleep(0.6)  # at least one renewal through the proxy
        proxy.blackhole()
        line = wait_until(
            lambda: [
                r for r in cut_off.log_records()
                if r["message"].startswith("lease about to expire") and r.get("job_id") == job_id
            ],
            what="the cut-off worker to stop its call",
        )[0]  # fmt: skip

        async def lease_expiry() -> dt.datetime | None:
            conn = await asyncpg.connect(pg_dsn)
            try:
                row = await conn.fetchrow(
                    "SELECT lease_expires_at, state FROM jobs WHERE id = $1", job_id
                )
                assert row is not None
                return row["lease_expires_at"] if row["state"] == "running" else None
            finally:
                await conn.close()

        expires = asyncio.run(lease_expiry())
        stopped_at = dt.datetime.fromisoformat(line["time"])
        if expires is not None:
            # It gave up while its lease still held: nobody else could own the job yet.
            assert stopped_at < expires, (stopped_at, expires)
        harness.start("worker")
        facts = wait_settled(pg_dsn, [job_id])
        winner = [e for e in facts[job_id].events if e[1] == "succeeded"]
        assert winner and winner[0][2] != facts[job_id].events[1][2]
        proxy.heal()
    assert_completed_once(facts)


def test_database_link_delayed_then_reset_postgres(harness: ProcessHarness, pg_dsn: str) -> None:
    with TcpProxy(_pg_address(pg_dsn)) as proxy:
        url = _start_roles(harness, _via(pg_dsn, proxy), "api", "worker")
        harness.start("reaper", env={"JOBGATE_DATABASE_URL": pg_dsn})
        key = create_tenant(pg_dsn, "acme")
        with Load(url, key, interval_s=0.05) as load:
            wait_until(lambda: len(load.accepted) >= 5, what="some accepted jobs")
            proxy.delay(0.25)
            before = len(load.accepted)
            wait_until(lambda: len(load.accepted) >= before + 5, what="submits over a slow link")
            proxy.reset()
            _wait_for_status(url, key, 503)
            proxy.heal()
            before = len(load.accepted)
            wait_until(lambda: len(load.accepted) >= before + 10, what="submits after the reset")
        assert proxy.connections_total > 1
        assert {s for s in load.statuses if s not in (202, 503)} == set(), load.statuses
        facts = wait_settled(pg_dsn, list(audit.job_facts(pg_dsn)), timeout_s=120)
    assert set(load.accepted) <= set(facts)
    assert_completed_once(facts)
