"""Claims by id on SQLite: the caps are applied in Python inside one write operation (the single
writer makes the counts it reads exact), as job_claim applies them."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from jobgate.domain.job import Job
from jobgate.storage import sql
from jobgate.storage.records import ClaimPolicy
from jobgate.storage.rows import RowDecoder
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.store.transport import TransportQueries

Q = sql.load("jobgate.storage.sqlite")


class SqliteTransport(TransportQueries):
    _db: SqliteDatabase
    _decode: RowDecoder

    async def _claim_by_id(
        self,
        *,
        worker_id: str,
        ids: list[str],
        lease_ttl_s: float,
        providers: list[str] | None,
        rules: ClaimPolicy,
        now: datetime | None,
    ) -> list[Job]:
        json = self._sql.codec.json
        at = self._sql.codec.now(now)
        params = {"ids": json(ids), "now": at, "providers": json(providers)}

        def claim(conn: sqlite3.Connection) -> list[Job]:
            running = dict(conn.execute(Q["job_claim_running"].sql).fetchall())
            by_key: dict[tuple[str, str], int] = {}
            if rules.keys_capped:
                for row in conn.execute(Q["job_claim_running_keys"].sql).fetchall():
                    by_key[(row["tenant_id"], row["concurrency_key"])] = row["running"]
            chosen: list[str] = []
            for row in conn.execute(Q["job_claim_by_id_candidates"].sql, params).fetchall():
                tenant, key = row["tenant_id"], row["concurrency_key"]
                if tenant in rules.blocked_tenants:
                    continue
                share = rules.share(tenant)
                if share.max_running > 0 and running.get(tenant, 0) >= share.max_running:
                    continue
                keyed = share.max_running_per_key > 0 and key is not None
                if keyed and by_key.get((tenant, key), 0) >= share.max_running_per_key:
                    continue
                running[tenant] = running.get(tenant, 0) + 1
                if keyed:
                    by_key[(tenant, key)] = by_key.get((tenant, key), 0) + 1
                chosen.append(row["id"])
            if not chosen:
                return []
            lease = {"ids": json(chosen), "worker_id": worker_id, "lease_ttl_s": lease_ttl_s}
            rows = conn.execute(Q["job_claim"].sql, {**lease, "now": at}).fetchall()
            claimed = [self._decode.job(row) for row in rows]
            per_tenant: dict[str, int] = {}
            for job in claimed:
                per_tenant[job.tenant_id] = per_tenant.get(job.tenant_id, 0) + 1
            for tenant_id, count in per_tenant.items():
                conn.execute(Q["tenant_stats_bump"].sql, {"tenant_id": tenant_id, "count": count})
            return claimed

        return await self._db.write(claim)
