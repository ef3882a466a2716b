"""TransportStore on PostgreSQL: claims by id (SKIP LOCKED, serialised while a cap applies,
like job_claim) and the publication ledger of the transport relay."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from jobgate.domain.job import Job
from jobgate.storage import sql
from jobgate.storage.records import ClaimedById, ClaimPolicy, Publication
from jobgate.storage.rows import RowDecoder
from jobgate.wakeups import ChangeHub

Q = sql.load("jobgate.storage.postgres")
T = TypeVar("T")
UNBOUNDED = 2**31 - 1


class PostgresTransport:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    changes: ChangeHub
    _decode: RowDecoder

    async def _fetch(self, query_name: str, /, **params: Any) -> list[asyncpg.Record]:
        raise NotImplementedError

    async def _with_conn(
        self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False
    ) -> T:
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
        query = Q["job_claim_by_id"]
        args = query.args(
            {
                "ids": ids,
                "worker_id": worker_id,
                "lease_ttl_s": lease_ttl_s,
                "providers": None if providers is None else list(providers),
                "now": now,
                "shares": [
                    {
                        "tenant_id": tenant_id,
                        "max_running": share.max_running,
                        "weight": share.weight,
                        "max_running_per_key": share.max_running_per_key,
                    }
                    for tenant_id, share in rules.tenants.items()
                ],
                "default_max_running": rules.default.max_running,
                "default_max_running_per_key": rules.default.max_running_per_key,
                "keys_capped": rules.keys_capped,
                "blocked_tenants": sorted(rules.blocked_tenants),
            }
        )

        async def claim(conn: Any) -> list[asyncpg.Record]:
            if rules.capped:  # the same lock as job_claim: running counts include every claim
                await conn.execute(Q["job_claim_lock"].sql)
            return list(await conn.fetch(query.positional_sql, *args))

        rows = await self._with_conn(claim, transaction=rules.capped)
        claimed: list[Job] = sorted(
            (self._decode.job(row) for row in rows), key=lambda j: (j.priority, j.run_at, j.id)
        )
        if claimed:
            self.changes.jobs_changed(job.id for job in claimed)
        taken = {job.id for job in claimed}
        rest = [job_id for job_id in ids if job_id not in taken]
        deferred: list[str] = []
        if rest:
            queued = await self._fetch("job_claim_by_id_queued", ids=rest)
            deferred = sorted(row["id"] for row in queued)
        return ClaimedById(claimed, deferred)

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
        rows = await self._fetch(
            "transport_publish_due",
            limit=limit,
            republish_after_s=republish_after_s,
            window=UNBOUNDED if window is None else window,
            shares=weights,
            default_weight=rules.default.weight,
            now=now,
            skip_providers=list(skip_providers or ()),
        )
        return [Publication(row["job_id"], row["published_count"]) for row in rows]

    async def transport_defer(
        self, *, job_ids: Sequence[str], delay_s: float, now: datetime | None = None
    ) -> None:
        if job_ids:
            await self._fetch("transport_defer", ids=list(job_ids), delay_s=delay_s, now=now)
