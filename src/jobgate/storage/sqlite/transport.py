"""Claims by id on SQLite: the caps and the per-key limits are applied in Python inside one write
operation (the single writer makes the counts it reads exact), as job_claim applies them."""

from __future__ import annotations

import sqlite3

from jobgate.domain.job import Job
from jobgate.storage.records import ClaimRequest
from jobgate.storage.sqlite.claims import (
    NOTHING_LEASED,
    KeyLimits,
    Leased,
    RunningSlots,
    lease,
)
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q
from jobgate.storage.store.transport import TransportQueries


class SqliteTransport(TransportQueries):
    _db: SqliteDatabase

    async def _claim_by_id(self, claim: ClaimRequest) -> list[Job]:
        json, rules = self._sql.codec.json, claim.rules
        at = self._sql.codec.now(claim.now)
        params = {"ids": json(claim.ids), "now": at, "providers": json(claim.providers)}

        def run(conn: sqlite3.Connection) -> Leased:
            slots = RunningSlots.read(conn, rules)
            keys = KeyLimits(rules, at)
            passed: dict[str, set[str]] = {}  # per tenant, read once
            chosen = []
            for row in conn.execute(Q["job_claim_by_id_candidates"].sql, params).fetchall():
                tenant, key = row["tenant_id"], row["concurrency_key"]
                if tenant in rules.blocked_tenants:
                    continue
                if tenant not in passed:
                    passed[tenant] = set(keys.passed_over(conn, tenant))
                if key in passed[tenant] or not keys.admits(tenant, key):
                    continue
                if slots.take(rules.share(tenant), tenant, key):
                    chosen.append(row["id"])
            if not chosen:
                return NOTHING_LEASED
            leased = lease(
                conn,
                chosen,
                worker_id=claim.worker_id,
                lease_ttl_s=claim.lease_ttl_s,
                now=at,
            )
            keys.take(conn, leased)
            return leased

        leased = await self._db.write(run)
        return self._decode.jobs_at(leased.rows, leased.columns)
