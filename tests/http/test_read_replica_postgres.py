"""JOBGATE_READ_DATABASE_URL over a real streaming replica: a private primary cluster and a hot
standby made from it with pg_basebackup (tests.support.pgcluster), both on 127.0.0.1,
started once for the module; an API process on 127.0.0.1 over them. Status, list, events and
long-poll reads are served by the replica; a tenant's read after its own submit or cancel is
not, even with the replica's replay paused; a replica behind by more than read_max_lag_s is
not read; a replica that is down is answered for by the primary. Nothing answers a 5xx."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import prometheus_client
import pytest

from jobgate.config import Settings
from jobgate.process.runtime import Runtime
from tests.support import pgcluster
from tests.support.pgcluster import PrivateCluster

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]

CHAT = {"model": "sim-echo", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[PrivateCluster, PrivateCluster]]:
    """A primary and its streaming replica, for the whole module (each test its own database,
    which the replica replays like everything else)."""
    if not pgcluster.available():
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) are not installed")
    with PrivateCluster() as primary:
        replica = primary.standby()
        try:
            replica.start()
            yield primary, replica
        finally:
            replica.close()


@contextlib.asynccontextmanager
async def _api(
    clusters: tuple[PrivateCluster, PrivateCluster], max_lag_s: float
) -> AsyncIterator[tuple[httpx.AsyncClient, Runtime, str]]:
    """An API process over a fresh database of the primary, reading from the replica."""
    primary, replica = clusters
    name = f"jobgate_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(primary.dsn())
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    settings = Settings(
        database_url=primary.dsn(name),
        read_database_url=replica.dsn(name),
        read_max_lag_s=max_lag_s,
        database_pool_size=4,
        shutdown_grace_s=0,
    )
    runtime = Runtime(settings)
    await runtime.open()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop = asyncio.Event()
    serving = asyncio.create_task(runtime.run_roles(("api",), stop, sock=sock))
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            async with asyncio.timeout(60):
                while True:
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get("/healthz")).status_code == 200:
                            break
                    await asyncio.sleep(0.02)
            yield http, runtime, primary.dsn(name)
    finally:
        stop.set()
        await asyncio.wait_for(serving, 15)
        sock.close()
        await runtime.close()


def _answered(by: str) -> float:
    value = prometheus_client.REGISTRY.get_sample_value(
        "jobgate_replica_reads_total", {"answered_by": by}
    )
    return value or 0.0


async def _get(http: httpx.AsyncClient, path: str, key: str, **params: Any) -> dict[str, Any]:
    answer = await http.get(path, params=params, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def _submit(http: httpx.AsyncClient, key: str, **headers: str) -> httpx.Response:
    answer = await http.post(
        "/v1/jobs",
        json={"endpoint": "/v1/chat/completions", "body": CHAT},
        headers={"Authorization": f"Bearer {key}", **headers},
    )
    assert answer.status_code == 202, answer.text
    return answer


async def _until_the_replica_answers(http: httpx.AsyncClient, path: str, key: str) -> None:
    """Read until a read is the replica's (it has replayed past the caller's last write)."""
    async with asyncio.timeout(30):
        while True:
            before = _answered("replica")
            await _get(http, path, key)
            if _answered("replica") > before:
                return
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _replay_paused(replica: PrivateCluster, database: str) -> AsyncIterator[None]:
    conn = await asyncpg.connect(replica.dsn(database))
    try:
        await conn.execute("SELECT pg_wal_replay_pause()")
        yield
    finally:
        await conn.execute("SELECT pg_wal_replay_resume()")
        await conn.close()


async def test_reads_come_from_the_replica_and_a_writer_reads_its_own_writes(
    clusters: tuple[PrivateCluster, PrivateCluster],
) -> None:
    async with _api(clusters, max_lag_s=30) as (http, runtime, _):
        issued = await runtime.tenants.create("acme")
        key, tenant_id = issued.api_key, issued.tenant.id
        job = (await _submit(http, key)).json()
        path = f"/v1/jobs/{job['id']}"
        # Served by the replica once it has replayed past the submit: status, list, events.
        await _until_the_replica_answers(http, path, key)
        before = _answered("replica")
        assert (await _get(http, path, key))["status"] == "queued"
        listed = await _get(http, "/v1/jobs", key)
        assert [j["id"] for j in listed["data"]] == [job["id"]]
        events = await _get(http, f"{path}/events", key)
        assert [e["to"] for e in events["data"]] == ["queued"]
        long_poll = await _get(http, path, key, wait="0.2")  # times out, no change
        assert long_poll["status"] == "queued"
        assert _answered("replica") - before == 4

        database = runtime.settings.read_database_url
        assert database is not None
        async with _replay_paused(clusters[1], database.rsplit("/", 1)[1]):
            # A change behind the API's back (no write of this tenant through it): the replica,
            # paused but within its bound, still answers the old state.
            await runtime.storage.job_cancel(job_id=job["id"], tenant_id=tenant_id, actor="t")
            assert (await _get(http, path, key))["status"] == "queued"

            # The tenant's own writes are read back at once, however far behind the replica.
            second = (await _submit(http, key)).json()
            assert (await _get(http, f"/v1/jobs/{second['id']}", key))["status"] == "queued"
            cancel = await http.post(
                f"/v1/jobs/{second['id']}/cancel", headers={"Authorization": f"Bearer {key}"}
            )
            assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled"
            assert (await _get(http, f"/v1/jobs/{second['id']}", key))["status"] == "cancelled"
            assert (await _get(http, path, key))["status"] == "cancelled"  # the primary's now
            listed = await _get(http, "/v1/jobs", key)
            assert [j["status"] for j in listed["data"]] == ["cancelled", "cancelled"]
            events = await _get(http, f"/v1/jobs/{second['id']}/events", key)
            assert [e["to"] for e in events["data"]] == ["queued", "cancelled"]

            # An idempotent submit and its replay are answered by the primary.
            first = await _submit(http, key, **{"Idempotency-Key": "k-1"})
            again = await _submit(http, key, **{"Idempotency-Key": "k-1"})
            assert again.headers["Idempotent-Replayed"] == "true"
            assert again.json()["id"] == first.json()["id"]
            read = await _get(http, f"/v1/jobs/{first.json()['id']}", key)
            assert read["status"] == "queued"

        # Replay resumed: the replica catches up and answers again, with the latest state.
        await _until_the_replica_answers(http, f"/v1/jobs/{second['id']}", key)
        assert (await _get(http, f"/v1/jobs/{second['id']}", key))["status"] == "cancelled"


async def test_a_response_status_read_comes_from_the_replica_and_its_cancel_reads_back(
    clusters: tuple[PrivateCluster, PrivateCluster],
) -> None:
    """GET /v1/responses/{id} (what OpenAI's SDK polls for a background response) is a status
    read too: the replica answers it, and the tenant's own cancel reads back at once."""
    async with _api(clusters, max_lag_s=30) as (http, runtime, _):
        issued = await runtime.tenants.create("acme")
        key, tenant_id = issued.api_key, issued.tenant.id
        auth = {"Authorization": f"Bearer {key}"}
        body = {"model": "sim-echo", "input": "hi", "background": True}
        created = await http.post("/v1/responses", json=body, headers=auth)
        assert created.status_code == 200, created.text
        path = f"/v1/responses/{created.json()['id']}"
        await _until_the_replica_answers(http, path, key)
        database = (runtime.settings.read_database_url or "").rsplit("/", 1)[1]
        async with _replay_paused(clusters[1], database):
            job_id = created.json()["id"]
            await runtime.storage.job_cancel(job_id=job_id, tenant_id=tenant_id, actor="t")
            assert (await _get(http, path, key))["status"] == "queued"  # the replica's
            cancel = await http.post(f"{path}/cancel", headers=auth)
            assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled"
            assert (await _get(http, path, key))["status"] == "cancelled"


async def test_a_long_poll_woken_by_a_change_reads_it_from_the_primary(
    clusters: tuple[PrivateCluster, PrivateCluster],
) -> None:
    async with _api(clusters, max_lag_s=30) as (http, runtime, _):
        issued = await runtime.tenants.create("acme")
        key, tenant_id = issued.api_key, issued.tenant.id
        job = (await _submit(http, key)).json()
        path = f"/v1/jobs/{job['id']}"
        await _until_the_replica_answers(http, path, key)
        database = (runtime.settings.read_database_url or "").rsplit("/", 1)[1]
        async with _replay_paused(clusters[1], database):
            poll = asyncio.create_task(_get(http, path, key, wait="20"))
            await asyncio.sleep(0.5)  # parked, its first read the replica's
            await runtime.storage.job_cancel(job_id=job["id"], tenant_id=tenant_id, actor="t")
            async with asyncio.timeout(10):  # woken by NOTIFY, not by the 20 s
                assert (await poll)["status"] == "cancelled"


async def test_a_replica_behind_its_bound_is_not_read(
    clusters: tuple[PrivateCluster, PrivateCluster],
) -> None:
    async with _api(clusters, max_lag_s=0.5) as (http, runtime, _):
        issued = await runtime.tenants.create("acme")
        key, tenant_id = issued.api_key, issued.tenant.id
        job = (await _submit(http, key)).json()
        path = f"/v1/jobs/{job['id']}"
        await _until_the_replica_answers(http, path, key)
        database = (runtime.settings.read_database_url or "").rsplit("/", 1)[1]
        async with _replay_paused(clusters[1], database):
            await runtime.storage.job_cancel(job_id=job["id"], tenant_id=tenant_id, actor="t")
            async with asyncio.timeout(15):  # at most ~0.5 s stale, then the primary's
                while (await _get(http, path, key))["status"] != "cancelled":  # noqa: ASYNC110 -- a condition on another server, polled
                    await asyncio.sleep(0.05)
            before = _answered("replica")
            for _ in range(5):
                assert (await _get(http, path, key))["status"] == "cancelled"
            assert _answered("replica") == before


async def test_a_replica_that_is_down_is_answered_for_by_the_primary(
    clusters: tuple[PrivateCluster, PrivateCluster],
) -> None:
    replica = clusters[1]
    async with _api(clusters, max_lag_s=30) as (http, runtime, _):
        issued = await runtime.tenants.create("acme")
        key, tenant_id = issued.api_key, issued.tenant.id
        job = (await _submit(http, key)).json()
        path = f"/v1/jobs/{job['id']}"
        await _until_the_replica_answers(http, path, key)
        replica.stop(mode="immediate")
        before = _answered("replica")
        try:
            await runtime.storage.job_cancel(job_id=job["id"], tenant_id=tenant_id, actor="t")
            for _ in range(3):  # every read answered, by the primary, with the latest state
                assert (await _get(http, path, key))["status"] == "cancelled"
                listed = await _get(http, "/v1/jobs", key)
                assert [j["status"] for j in listed["data"]] == ["cancelled"]
                events = await _get(http, f"{path}/events", key)
                assert [e["to"] for e in events["data"]] == ["queued", "cancelled"]
                assert (await _get(http, path, key, wait="0.1"))["status"] == "cancelled"
            assert _answered("replica") == before
        finally:
            replica.start()
