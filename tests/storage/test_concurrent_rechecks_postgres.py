"""PostgreSQL, READ COMMITTED: a statement that waits for a row another transaction is updating
re-checks its WHERE clause against the row as committed (EvalPlanQual). A filter written as a
semi-join over a set-returning function, `x IN (SELECT jsonb_array_elements_text(:list))`,
matches nothing in that re-check, so the statement silently skipped the row: a batches role's
release after a concurrent cancel left the batch leased for a whole lease (its cancel waited a
minute), and a cancel racing a pass could be refused as a conflict. Such filters are written
`x = ANY(ARRAY(SELECT ...))` / `x <> ALL(ARRAY(...))`, evaluated once before any row is read.

The test holds a concurrent update of the row open, starts the statement, waits until it is
blocked on that row, commits the other update and checks that the statement still applied."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import asyncpg
import pytest

from jobgate.storage.postgres.store import PostgresStore, postgres_store
from jobgate.testing import FakeClock
from tests.storage.helpers import make_tenant
from tests.support.databases import PostgresTemplate

pytestmark = pytest.mark.postgres


@pytest.fixture
async def storage(pg_template: PostgresTemplate) -> AsyncIterator[PostgresStore]:
    dsn = await pg_template.clone()
    store = postgres_store(dsn, pool_size=4)
    await store.open()
    yield store
    await store.close()
    await pg_template.drop_clone(dsn)


async def _after_a_concurrent_update(
    storage: PostgresStore, concurrent_update: str, row_id: str, statement: Awaitable[Any]
) -> Any:
    """Run `statement` while another transaction has updated the row `row_id` and not yet
    committed; commit it once the statement waits for the row, and answer the statement's."""
    other = await asyncpg.connect(storage.engine.dsn)
    try:
        tx = other.transaction()
        await tx.start()
        assert await other.execute(concurrent_update, row_id) == "UPDATE 1"
        running = asyncio.ensure_future(statement)
        for _ in range(1000):
            waiting = await other.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting or running.done():
                break
            await asyncio.sleep(0.01)
        assert not running.done(), "the statement did not wait for the updated row"
        await tx.commit()
        return await asyncio.wait_for(running, 30)
    finally:
        await other.close()


async def test_a_batch_release_after_a_concurrent_cancel_still_releases(
    storage: PostgresStore, clock: FakeClock
) -> None:
    tenant = await make_tenant(storage)
    await storage.file_create(file_id="file_1", tenant_id=tenant.id, purpose="batch", filename="in")
    await storage.file_finish(file_id="file_1", bytes=0, lines=1)
    await storage.batch_create(
        batch={
            "id": "batch_1", "tenant_id": tenant.id, "endpoint": "/v1/chat/completions",
            "input_file_id": "file_1", "completion_window": "24h", "window_s": 86400,
            "metadata": None, "priority": 0,
        },
        now=clock.now(),
    )  # fmt: skip
    [leased] = await storage.batch_claim_live(limit=8, lease_s=60)
    cancel = "UPDATE batches SET status = 'cancelling', final_status = 'cancelled' WHERE id = $1"
    released = await _after_a_concurrent_update(
        storage,
        cancel,
        leased.id,
        storage.batch_update(
            batch_id=leased.id, from_statuses=("validating", "in_progress", "cancelling"),
            release=True,
        ),
    )  # fmt: skip
    assert released is not None and released.status == "cancelling"
    # Released: the next pass of a batches role takes it at once.
    [again] = await storage.batch_claim_live(limit=8, lease_s=60)
    assert again.id == leased.id and again.final_status == "cancelled"
