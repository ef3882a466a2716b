"""A bounded batch on PostgreSQL counts its queue bounds inside its insert statement (one scan of
the queued rows, no statement of its own) under the admission locks taken by the statement
before it, so the count is still exact: two batches racing for the last places do not both get
in."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobgate import errors
from jobgate.storage.postgres.executor import PostgresExecutor
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.records import QueueLimit
from tests.storage.helpers import insert_many, make_tenant, new_job

pytestmark = [pytest.mark.asyncio, pytest.mark.postgres]


async def test_a_bounded_batch_is_locks_then_one_insert(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant = await make_tenant(storage)
        named: list[str] = []
        fetch = PostgresExecutor.fetch

        async def recording(conn: Any, query: str, /, **params: Any) -> Any:
            named.append(query)
            return await fetch(conn, query, **params)

        monkeypatch.setattr(PostgresExecutor, "fetch", staticmethod(recording))
        await insert_many(
            storage,
            jobs=[new_job(tenant) for _ in range(3)],
            queue_limit=QueueLimit(tenant_max=10, total_max=10),
        )
        assert named == ["queue_lock_tenant", "queue_lock_total", "job_insert_many_counted"]
        with pytest.raises(errors.QueueFull) as full:  # 3 queued + 8 > 10
            await insert_many(
                storage,
                jobs=[new_job(tenant) for _ in range(8)],
                queue_limit=QueueLimit(tenant_max=10),
            )
        assert full.value.limit == "max_queued"
        fits = await insert_many(
            storage, jobs=[new_job(tenant) for _ in range(7)], queue_limit=QueueLimit(tenant_max=10)
        )
        assert len(fits) == 7  # exactly at the bound
    finally:
        await storage.close()


async def test_two_batches_racing_for_the_last_places_do_not_both_get_in(pg_dsn: str) -> None:
    storage = postgres_store(pg_dsn, pool_size=4)
    await storage.open()
    try:
        tenant = await make_tenant(storage)
        other = await make_tenant(storage, "other")
        await insert_many(storage, jobs=[new_job(tenant) for _ in range(2)])
        await insert_many(storage, jobs=[new_job(other) for _ in range(2)])
        # 2 + 3 = 5 for the tenant; then 5 + 2 queued in all, 7 + 3 = 10.
        for bound in (QueueLimit(tenant_max=5), QueueLimit(total_max=10)):
            outcomes = await asyncio.gather(
                *(
                    insert_many(
                        storage, jobs=[new_job(tenant) for _ in range(3)], queue_limit=bound
                    )
                    for _ in range(2)
                ),
                return_exceptions=True,
            )
            stored = [o for o in outcomes if isinstance(o, list)]
            refused = [o for o in outcomes if isinstance(o, errors.QueueFull)]
            assert (len(stored), len(refused)) == (1, 1), outcomes
    finally:
        await storage.close()
