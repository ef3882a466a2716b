"""Job search reads a bounded walk on both stores: a tenant's jobs newest first through
jobs_by_tenant (the cursor and a created range bound the index scan itself), at most the walk
limit of them whatever the criteria (model, provider, status: checked job by job, no index of
their own), in the page's order (no sort of the walked jobs); metadata through the GIN index
jobs_by_metadata on PostgreSQL. Under PostgreSQL's custom and generic plans alike (asyncpg
settles on the generic plan of a prepared statement after five runs)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.storage import base
from jobgate.storage.postgres.executor import Q as PG
from jobgate.storage.postgres.store import postgres_store
from jobgate.storage.protocol import Storage
from jobgate.storage.sqlite.executor import Q as LITE
from jobgate.storage.sqlite.store import sqlite_store
from jobgate.storage.store.jobs import _search_query
from jobgate.testing import FakeClock
from tests.storage.helpers import insert_many, make_tenant, new_job
from tests.storage.pg_plans import PLAN_MODES, explained, nodes

TENANTS = ("acme", "beta", "gamma")
PER_TENANT = 1200
MODELS = 12  # model-3 is one job in twelve of each tenant's
PROVIDERS = 6
PAGE = 21  # a page of 20 and the look-ahead for has_more
WALK = 600  # the walk's bound in these plans: the tenant has 1,200 jobs

# Searches by the walk (common criteria fill the page early; a rare one walks to the bound),
# and by metadata.
WALKS: dict[str, dict[str, Any]] = {
    "model": {"model": "model-3"},
    "provider": {"provider": "prov-2"},
    "rare model": {"model": "model-none"},
    "model and status": {"model": "model-3", "states": ("queued",)},
    "time range": {"created_before": datetime(2026, 1, 1, 0, 30, tzinfo=UTC)},
    "rare in a time range": {
        "model": "model-none",
        "created_after": datetime(2026, 1, 1, 0, 10, tzinfo=UTC),
        "created_before": datetime(2026, 1, 1, 0, 30, tzinfo=UTC),
    },
}
METADATA = {"metadata": {"user": "u-7"}}
# The rows a page answers: a full page and its look-ahead, but for a rare model: only the
# walk's last job when the walk reaches its bound (a partial page), none when the range ends
# the walk first.
ROWS = {"rare model": 1, "rare in a time range": 0}


async def fill(storage: Storage) -> str:
    """Three tenants' jobs, created in turns (every tenant submits all along); the first
    tenant's id."""
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    tenants = [await make_tenant(storage, name) for name in TENANTS]
    for start in range(0, PER_TENANT, 400):
        for tenant in tenants:
            jobs = [
                new_job(
                    tenant,
                    model=f"model-{n % MODELS}",
                    provider=f"prov-{n % PROVIDERS}",
                    metadata={"user": f"u-{n % 40}"} if n % 4 else {},
                )
                for n in range(start, start + 400)
            ]
            await insert_many(storage, jobs=jobs, now=clock.now())
        clock.advance(1200)
    return tenants[0].id


def params(tenant_id: str, search: dict[str, Any], *, time: Any, json: Any) -> dict[str, Any]:
    where = JobFilter(tenant_id=tenant_id, **search)
    found = base.bulk_filter_params(where, BulkAction.CANCEL, time=time, json=json)
    return {**found, "after_id": None, "limit": PAGE, "walk_limit": WALK}


@pytest.mark.asyncio
@pytest.mark.postgres
async def test_postgres_search_walks_a_bounded_stretch_of_the_tenant(pg_dsn: str) -> None:
    storage = postgres_store(pg_dsn, pool_size=2)
    await storage.open()
    try:
        tenant_id = await fill(storage)
    finally:
        await storage.close()
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("ANALYZE jobs")
        for name, search in WALKS.items():
            query = _search_query(JobFilter(**search))
            assert query == "job_search"
            values = params(tenant_id, search, time=lambda t: t, json=_json_text)
            for mode in PLAN_MODES:
                plan = await explained(conn, query, values, mode)
                walks = [n for n in nodes(plan) if n.get("Index Name") == "jobs_by_tenant"]
                scanned = {node["Node Type"] for node in nodes(plan)}
                assert len(walks) == 1 and "Seq Scan" not in scanned, (name, mode, scanned)
                assert "Sort" not in scanned, (name, mode, scanned)  # in the page's order
                assert walks[0]["Actual Rows"] <= WALK, (name, mode)
                assert plan["Actual Rows"] == ROWS.get(name, PAGE), (name, mode)
                if name == "rare in a time range":  # the range bounds the scan: 400 jobs read
                    assert walks[0]["Actual Rows"] == 400, (name, mode)
        values = params(tenant_id, METADATA, time=lambda t: t, json=_json_text)
        for mode in PLAN_MODES:
            plan = await explained(conn, "job_search_by_metadata", values, mode)
            used = {node.get("Index Name") for node in nodes(plan)}
            scanned = {node["Node Type"] for node in nodes(plan)}
            assert "jobs_by_metadata" in used and "Seq Scan" not in scanned, (mode, used)
            assert plan["Actual Rows"] == PAGE, mode
        plain = {"tenant_id": tenant_id, "states": None, "dead_lettered": None}
        for mode in PLAN_MODES:  # the plain list is unchanged: jobs_by_tenant, no sort
            plan = await explained(conn, "job_list", {**plain, "after_id": None, "limit": 21}, mode)
            found = {(n["Node Type"], n.get("Index Name")) for n in nodes(plan)}
            assert ("Index Scan", "jobs_by_tenant") in found and ("Sort", None) not in found
    finally:
        await conn.close()


def _json_text(value: Any) -> Any:
    return None if value is None else json.dumps(value)  # no jsonb codec on this connection


@pytest.mark.asyncio
async def test_sqlite_search_walks_a_bounded_stretch_of_the_tenant(tmp_path: Path) -> None:
    path = tmp_path / "jobgate.db"
    storage = sqlite_store(str(path), clock=FakeClock(datetime(2026, 1, 1, tzinfo=UTC)))
    await storage.open()
    await storage.migrate()
    try:
        tenant_id = await fill(storage)
    finally:
        await storage.close()
    conn = sqlite3.connect(path)
    try:
        for name, search in {**WALKS, "metadata": METADATA}.items():
            query = _search_query(JobFilter(**search))
            values = params(tenant_id, search, time=lambda t: t and t.timestamp(), json=_json_text)
            plan = " | ".join(
                row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + LITE[query].sql, values)
            )
            assert "USING INDEX jobs_by_tenant " in plan + " ", (name, plan)
            rows = conn.execute(LITE[query].sql, values).fetchall()
            # metadata too is walked on SQLite: user u-7 is one job in forty of those walked
            expected = {**ROWS, "metadata": WALK // 40 + 1}.get(name, PAGE)
            assert len(rows) == expected, name
    finally:
        conn.close()


def test_every_search_statement_exists_in_both_dialects() -> None:
    for search in (*WALKS.values(), METADATA):
        query = _search_query(JobFilter(**search))
        assert query in PG and query in LITE
