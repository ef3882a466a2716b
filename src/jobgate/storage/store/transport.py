"""TransportStore, written once over the executor: claims by id and the publication ledger of
the transport relay. The claim itself applies the tenant and key caps in one transaction: the
dialect's Transactions.claim_by_id."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate.storage.executor import SqlPart
from jobgate.storage.records import ClaimedById, ClaimPolicy, ClaimRequest, Publication

UNBOUNDED = 2**31 - 1


class TransportQueries(SqlPart):
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
        claimed = await self._tx.claim_by_id(
            ClaimRequest(
                worker_id=worker_id,
                ids=ids,
                limit=len(ids),
                lease_ttl_s=lease_ttl_s,
                providers=None if providers is None else list(providers),
                rules=policy or ClaimPolicy(),
                now=now,
            )
        )
        claimed.sort(key=lambda j: (j.priority, j.run_at, j.id))
        if claimed:
            self.changes.jobs_changed(job.id for job in claimed)
        taken = {job.id for job in claimed}
        rest = [job_id for job_id in ids if job_id not in taken]
        deferred: list[str] = []
        if rest:
            queued = await self._sql.read("job_claim_by_id_queued", ids=self._sql.codec.json(rest))
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
        sweep: bool = True,
    ) -> list[Publication]:
        rules = policy or ClaimPolicy()
        weights = [
            {"tenant_id": tenant_id, "weight": share.weight}
            for tenant_id, share in rules.tenants.items()
        ]
        codec = self._sql.codec
        rows = await self._sql.write(
            "transport_publish_due",
            limit=limit,
            republish_after_s=republish_after_s,
            window=UNBOUNDED if window is None else window,
            shares=codec.json(weights),
            default_weight=rules.default.weight,
            now=codec.now(now),
            skip_providers=codec.json(list(skip_providers or ())),
            sweep=sweep,
        )
        return [Publication(row["job_id"], int(row["published_count"])) for row in rows]

    async def transport_defer(
        self, *, job_ids: Sequence[str], delay_s: float, now: datetime | None = None
    ) -> None:
        if job_ids:
            codec = self._sql.codec
            await self._sql.write_count(
                "transport_defer",
                ids=codec.json(list(job_ids)),
                delay_s=delay_s,
                now=codec.now(now),
            )
