"""Reading PostgreSQL plans in tests: EXPLAIN ANALYZE of a named statement, run for real and
rolled back, under a chosen plan cache mode, and the plan's nodes."""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from jobgate.storage.postgres.executor import Q

# The plan a fresh connection uses (custom) and the one asyncpg settles on after five
# executions of its prepared statement (generic).
PLAN_MODES = ("force_custom_plan", "force_generic_plan")


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A JSON plan's nodes, depth first."""
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


async def explained(
    conn: asyncpg.Connection, query: str, params: dict[str, Any], mode: str
) -> dict[str, Any]:
    """The top node of EXPLAIN (ANALYZE) of the named statement under `mode`: the statement
    runs for real, in a transaction rolled back after."""
    sql = Q[query]
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
        explain = "EXPLAIN (ANALYZE, FORMAT JSON) " + sql.positional_sql
        (plan,) = json.loads(await (await conn.prepare(explain)).fetchval(*sql.args(params)))
        top: dict[str, Any] = plan["Plan"]
        return top
    finally:
        await transaction.rollback()
