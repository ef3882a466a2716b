"""Claims on PostgreSQL (job_claim, job_claim_by_id): one statement (SKIP LOCKED), serialised
behind job_claim's lock while a cap applies, so that its running counts include every earlier
claim."""

from __future__ import annotations

import dataclasses
from typing import Any

from jobgate.domain.job import Job
from jobgate.storage.executor import Row
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.postgres.rate_limits import buckets_changed
from jobgate.storage.records import ClaimRequest
from jobgate.storage.rows import RowDecoder
from jobgate.storage.store.rate_limits import key_buckets, started


def claim_params(claim: ClaimRequest) -> dict[str, Any]:
    """A claim's parameters as job_claim and job_claim_by_id take them: its fields, and its
    rules flattened into the shares and defaults the SQL computes caps and fair shares from."""
    rules = claim.rules
    shares = [
        {
            "tenant_id": tenant_id,
            "max_running": share.max_running,
            "weight": share.weight,
            "max_running_per_key": share.max_running_per_key,
            "rpm_per_key": share.rpm_per_key,
        }
        for tenant_id, share in rules.tenants.items()
    ]
    return {
        **{field.name: getattr(claim, field.name) for field in dataclasses.fields(claim)},
        "shares": shares,
        "default_weight": rules.default.weight,
        "default_max_running": rules.default.max_running,
        "default_max_running_per_key": rules.default.max_running_per_key,
        "default_rpm_per_key": rules.default.rpm_per_key,
        "blocked_keys": rules.blocked_key_list(),
        "keys_capped": rules.keys_capped,
        "running_capped": rules.running_capped,
        "blocked_tenants": sorted(rules.blocked_tenants),
    }


async def claimed(
    sql: PostgresExecutor, decode: RowDecoder, query: str, claim: ClaimRequest
) -> list[Job]:
    """One claim statement (job_claim, job_claim_by_id); while a cap applies, behind
    job_claim_lock in the same transaction: two statements, hence the dialect's own. Under
    rpm_per_key, the buckets of the keys it started are taken in that transaction too."""
    capped = claim.rules.capped

    async def run(conn: Conn) -> list[Row]:
        if capped:
            await sql.fetch(conn, "job_claim_lock")
        rows = await sql.fetch(conn, query, **claim_params(claim))
        if claim.rules.keys_rated:
            pairs = ((row["tenant_id"], row["concurrency_key"]) for row in rows)
            buckets = key_buckets(pairs, claim.rules)
            if buckets:
                await buckets_changed(sql, conn, buckets, claim.now, started)
        return rows

    return [decode.job(row) for row in await sql.run(run, transaction=capped)]
