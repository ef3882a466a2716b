"""TransportStore on SQLite: claims by id (one writer: caps hold exactly) and the publication
ledger of the transport relay."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

import orjson

from jobgate.domain.job import Job
from jobgate.storage import sql
from jobgate.storage.records import ClaimedById, ClaimPolicy, Publication
from jobgate.storage.rows import RowDecoder
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.wakeups import ChangeHub

Q = sql.load("jobgate.storage.sqlite")


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


class SqliteTransport:
    """Mixed into SqliteStorage, which supplies `_db`, `_now`, `_decode` and `changes`."""

    _db: SqliteDatabase
    _decode: RowDecoder
    changes: ChangeHub

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def job_claim_by_id(
        self,
        *,
        worker_id: str,
        job_ids: Sequence[str],
        lease_ttl_s: float,
        providers: Sequence[str] | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
    ) -> ClaimedById:
        ids = sorted(set(job_ids))
        if not ids:
            return ClaimedById([], [])
        rules = policy or ClaimPolicy()
        at = self._now(now)
        params = {
            "ids": _json(ids),
            "now": at,
            "providers": None if providers is None else _json(list(providers)),
        }

        def claim(conn: sqlite3.Connection) -> ClaimedById:
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
            claimed: list[Job] = []
            if chosen:
                rows = conn.execute(
                    Q["job_claim"].sql,
                    {
                        "ids": _json(chosen),
                        "worker_id": worker_id,
                        "lease_ttl_s": lease_ttl_s,
                        "now": at,
                    },
                ).fetchall()
                claimed = sorted(
                    (self._decode.job(row) for row in rows),
                    key=lambda j: (j.priority, j.run_at, j.id),
                )
                per_tenant: dict[str, int] = {}
                for job in claimed:
                    per_tenant[job.tenant_id] = per_tenant.get(job.tenant_id, 0) + 1
                for tenant_id, count in per_tenant.items():
                    conn.execute(
                        Q["tenant_stats_bump"].sql, {"tenant_id": tenant_id, "count": count}
                    )
            queued = conn.execute(Q["job_claim_by_id_queued"].sql, {"ids": _json(ids)})
            deferred = sorted(row["id"] for row in queued.fetchall())
            return ClaimedById(claimed, deferred)

        result = await self._db.write(claim)
        if result.claimed:
            self.changes.jobs_changed(job.id for job in result.claimed)
        return result

    async def transport_publish_due(
        self,
        *,
        limit: int,
        republish_after_s: float,
        window: int | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
        skip_providers: Sequence[str] | None = None,
    ) -> list[Publication]:
        rules = policy or ClaimPolicy()
        weights = [
            {"tenant_id": tenant_id, "weight": share.weight}
            for tenant_id, share in rules.tenants.items()
        ]
        params = {
            "limit": limit,
            "republish_after_s": republish_after_s,
            "window": 2**31 - 1 if window is None else window,
            "shares": _json(weights),
            "default_weight": rules.default.weight,
            "now": self._now(now),
            "skip_providers": _json(list(skip_providers or ())),
        }

        def publish(conn: sqlite3.Connection) -> list[Publication]:
            rows = conn.execute(Q["transport_publish_due"].sql, params).fetchall()
            return [Publication(row["job_id"], int(row["published_count"])) for row in rows]

        return await self._db.write(publish)

    async def transport_defer(
        self, *, job_ids: Sequence[str], delay_s: float, now: datetime | None = None
    ) -> None:
        if not job_ids:
            return
        params = {"ids": _json(list(job_ids)), "delay_s": delay_s, "now": self._now(now)}
        await self._db.write(lambda conn: conn.execute(Q["transport_defer"].sql, params))
