"""PostgreSQL behind PgBouncer in transaction mode (Debian's pgbouncer, started by the tests):
with a listen URL the store keeps nothing in a server session. Calls from many connections at
once share the pooler's server sessions (named prepared statements would collide there), a
transaction carries its own lock and idle bounds (the pooler refuses them as start-up
settings, and a session SET would leak to the next client), the LISTEN connection goes to the
direct URL (stopping the pooler does not stop wake-ups), and a pooler given without a listen
URL is named at start instead of failing later."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from jobgate import errors
from jobgate.storage.postgres.store import PostgresStore, postgres_store
from tests.support import pgbouncer
from tests.support.databases import PostgresTemplate, admin_dsn

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]


@pytest.fixture
async def direct_dsn(pg_template: PostgresTemplate) -> AsyncIterator[str]:
    dsn = await pg_template.clone()
    yield dsn
    await pg_template.drop_clone(dsn)


async def _pooled(bouncer: pgbouncer.PgBouncer, dsn: str, **options: Any) -> PostgresStore:
    store = postgres_store(bouncer.dsn_for(dsn), listen_dsn=dsn, **options)
    await store.open()
    return store


async def test_many_connections_share_the_poolers_sessions(
    pg_bouncer: pgbouncer.PgBouncer, direct_dsn: str
) -> None:
    """Eight connections, each call on whichever server session is free: every statement
    answers (a statement prepared by name on one session is unknown on the next, or already
    taken there by another client)."""
    store = await _pooled(pg_bouncer, direct_dsn, pool_size=8)
    try:
        tenant = await store.tenant_create(tenant_id="ten_1", name="acme", webhook_secret="s")

        async def calls(n: int) -> None:
            for _ in range(10):
                assert await store.job_get(job_id=f"job_{n}", tenant_id=tenant.id) is None
                assert (await store.tenant_get(name="acme")) == tenant
                await store.database_now()

        await asyncio.gather(*(calls(n) for n in range(32)))
    finally:
        await store.close()


async def test_a_transaction_carries_its_bounds_and_leaves_none_behind(
    pg_bouncer: pgbouncer.PgBouncer, direct_dsn: str
) -> None:
    store = await _pooled(pg_bouncer, direct_dsn, lock_timeout_ms=1234, idle_in_transaction_ms=5678)

    async def bounds(conn: Any) -> tuple[str, str]:
        return (
            await conn.fetchval("SHOW lock_timeout"),
            await conn.fetchval("SHOW idle_in_transaction_session_timeout"),
        )

    try:
        assert await store.engine.executor.run(bounds, transaction=True) == ("1234ms", "5678ms")
        # The server sessions the pooler lends next keep their own defaults (SET LOCAL ended
        # with the transaction; a session SET would have stayed for the next client).
        for _ in range(5):
            assert await store.engine.executor.run(bounds) == ("0", "0")
    finally:
        await store.close()


async def test_a_lock_wait_through_the_pooler_ends_at_the_lock_timeout(
    pg_bouncer: pgbouncer.PgBouncer, direct_dsn: str
) -> None:
    store = await _pooled(pg_bouncer, direct_dsn, lock_timeout_ms=200)
    holder = await asyncpg.connect(direct_dsn)
    try:
        async with holder.transaction():
            await holder.execute("SELECT pg_advisory_xact_lock(7146013)")

            async def admit(conn: Any) -> None:
                await store.engine.executor.fetch(conn, "queue_lock_total")

            with pytest.raises(errors.StorageUnavailable, match="LockNotAvailable"):
                await asyncio.wait_for(store.engine.executor.run(admit, transaction=True), 30)
    finally:
        await holder.close()
        await store.close()


async def test_wakeups_come_through_the_listen_url_not_the_pooler(
    pg_template: PostgresTemplate, direct_dsn: str
) -> None:
    """A private pooler, stopped once the store listens: the LISTEN connection is the direct
    one, so a NOTIFY still wakes the store (through the pooler it would be cut, and a LISTEN
    there would follow no session)."""
    with pgbouncer.PgBouncer(upstream=admin_dsn()) as bouncer:
        store = await _pooled(bouncer, direct_dsn)
        try:
            await store.listen()
            assert store.engine.listening
            bouncer.close()
            with store.changes.watch_job("job_x") as changed:
                notifier = await asyncpg.connect(direct_dsn)
                try:
                    await notifier.execute("SELECT pg_notify('jobgate', 'j:job_x')")
                finally:
                    await notifier.close()
                await asyncio.wait_for(changed.wait(), 10)
        finally:
            await store.close()


async def test_a_pooler_without_a_listen_url_is_named_at_start(
    pg_bouncer: pgbouncer.PgBouncer, direct_dsn: str
) -> None:
    store = postgres_store(pg_bouncer.dsn_for(direct_dsn))
    with pytest.raises(errors.ConfigError, match="JOBGATE_LISTEN_DATABASE_URL"):
        await store.open()
    await store.close()
