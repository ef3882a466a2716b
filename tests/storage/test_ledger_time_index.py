"""usage_ledger's second index (migration 0026, PostgreSQL): a BRIN on created_at, which serves
the ledger's reads by time, instead of usage_ledger_by_tenant, which no statement could use
and every billed finish wrote an entry into. Beside them only a partial index on the rows of
provider-native batch parts (migration 0094, for their retention), which a job's finish never
writes into."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import pytest

from jobgate.storage.postgres.executor import Q as PG
from jobgate.testing import FakeClock

# The ledger's reads by time: every tenant's usage since a moment (budgets, cost reports).
BY_TIME = ("usage_tokens_since", "usage_by_model_since")


def test_the_ledger_reads_by_time_bound_created_at() -> None:
    for name in BY_TIME:
        assert "WHERE created_at >= :since" in PG[name].sql


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_the_ledger_keeps_one_btree_and_a_time_brin(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch(
            "SELECT c.relname, am.amname, pg_get_indexdef(i.indexrelid) AS definition"
            "  FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid"
            "  JOIN pg_am AS am ON am.oid = c.relam"
            " WHERE i.indrelid = 'usage_ledger'::regclass ORDER BY c.relname"
        )
    finally:
        await conn.close()
    indexes = {row["relname"]: (row["amname"], row["definition"]) for row in rows}
    assert set(indexes) == {
        "usage_ledger_pkey",
        "usage_ledger_by_time",
        "usage_ledger_batch_parts",
    }, indexes
    assert indexes["usage_ledger_by_time"][0] == "brin"
    assert "(created_at)" in indexes["usage_ledger_by_time"][1]
    # Partial: a job's ledger row (any other kind) writes no entry into it.
    assert indexes["usage_ledger_batch_parts"][1].endswith("WHERE (kind = 'batch'::text)")


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_the_reads_by_time_use_the_brin(pg_dsn: str, clock: FakeClock) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        for name in BY_TIME:
            async with conn.transaction():
                await conn.execute("SET LOCAL enable_seqscan = off")
                query = PG[name]
                params = {"since": clock.now() - timedelta(hours=1)}
                plan = await conn.fetch("EXPLAIN " + query.positional_sql, *query.args(params))
            assert any("usage_ledger_by_time" in row[0] for row in plan), (name, plan)
    finally:
        await conn.close()
