"""A PostgreSQL session whose client went silent inside a transaction (a network partition: the
server keeps the connection and waits for a client that will never speak again) gives its locks
back within a bounded time. A capped claim takes the cluster-wide claim lock inside its
transaction; a worker cut off between that lock and its COMMIT stopped every capped claim of
every worker until the server's TCP keepalive gave up (two hours by default), seen in the
soak as every queued job waiting minutes after the link was healed."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.parse
from collections.abc import Callable

import pytest

from jobgate import errors
from jobgate.domain.job import Job
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.records import ClaimPolicy, TenantShare
from tests.storage.helpers import make_tenant, new_job, submit_one
from tests.support.proxy import TcpProxy

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres, pytest.mark.timeout(90)]
CAPPED = ClaimPolicy(default=TenantShare(max_running_per_key=5))
# The end of a one-row statement's answer inside a transaction (CommandComplete "SELECT 1",
# then ReadyForQuery "in a transaction"): in a capped claim, the claim lock granted.
LOCK_GRANTED = b"SELECT 1\x00Z\x00\x00\x00\x05T"


def _address(dsn: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(dsn)
    return parts.hostname or "127.0.0.1", parts.port or 5432


def _via(dsn: str, proxy: TcpProxy) -> str:
    host, port = _address(dsn)
    return dsn.replace(f"@{host}:{port}/", f"@127.0.0.1:{proxy.port}/")


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(30):
        while not condition():  # noqa: ASYNC110 (a count another thread moves)
            await asyncio.sleep(0.05)


async def test_a_claim_cut_off_inside_its_transaction_blocks_no_other_claim_postgres(
    pg_dsn: str,
) -> None:
    direct = postgres_store(pg_dsn, pool_size=2, lock_timeout_ms=500)
    await direct.open()
    with TcpProxy(_address(pg_dsn)) as proxy:
        cut_off = postgres_store(_via(pg_dsn, proxy), pool_size=1, idle_in_transaction_ms=1000)
        await cut_off.open()
        stranded: asyncio.Task[object] | None = None
        try:
            tenant = await make_tenant(direct)
            for n in range(4):
                await submit_one(direct, job=new_job(tenant, concurrency_key=f"user{n}"))
            # The cut-off claim's lock is granted; the answer, and everything after, is lost.
            proxy.cut_reply(LOCK_GRANTED, silently=True)
            stranded = asyncio.create_task(
                cut_off.job_claim(worker_id="cut-off", limit=1, lease_ttl_s=60, policy=CAPPED)
            )
            await _until(lambda: proxy.replies_cut > 0)
            started = time.monotonic()
            claimed: list[Job] = []
            while not claimed and time.monotonic() - started < 30:
                with contextlib.suppress(errors.StorageUnavailable):  # behind the lock
                    claimed = await direct.job_claim(
                        worker_id="healthy", limit=4, lease_ttl_s=60, policy=CAPPED
                    )
            assert claimed, "the cut-off session still holds the claim lock after 30 s"
            assert time.monotonic() - started < 10
        finally:
            proxy.reset()  # the stranded client learns at last (it would wait out its timeout)
            if stranded is not None:
                stranded.cancel()
                with contextlib.suppress(asyncio.CancelledError, errors.StorageError):
                    await stranded
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cut_off.close(), 10)
            await direct.close()


async def test_every_session_is_ended_by_the_server_when_idle_inside_a_transaction_postgres(
    pg_dsn: str,
) -> None:
    """The bound is on by default, for every pooled session (the one above is shortened)."""
    storage = postgres_store(pg_dsn, pool_size=1)
    await storage.open()
    try:

        async def show(conn: object) -> str:
            return str(await conn.fetchval("SHOW idle_in_transaction_session_timeout"))  # type: ignore[attr-defined]

        assert await storage.engine.executor.run(show) == "10s"
    finally:
        await storage.close()
