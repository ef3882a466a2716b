"""Claims by id on PostgreSQL: one statement (SKIP LOCKED), serialised behind job_claim's lock
while a cap applies, so that its running counts include every earlier claim."""

from __future__ import annotations

from datetime import datetime

from jobgate.domain.job import Job
from jobgate.storage.executor import Row
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.records import ClaimPolicy
from jobgate.storage.rows import RowDecoder
from jobgate.storage.store.transport import TransportQueries


class PostgresTransport(TransportQueries):
    _sql: PostgresExecutor
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
        """Two statements while capped (the lock, then the claim), hence a dialect's own."""
        shares = [
            {
                "tenant_id": tenant_id,
                "max_running": share.max_running,
                "weight": share.weight,
                "max_running_per_key": share.max_running_per_key,
            }
            for tenant_id, share in rules.tenants.items()
        ]

        async def claim(conn: Conn) -> list[Row]:
            if rules.capped:
                await self._sql.fetch(conn, "job_claim_lock")
            return await self._sql.fetch(
                conn,
                "job_claim_by_id",
                ids=ids,
                worker_id=worker_id,
                lease_ttl_s=lease_ttl_s,
                providers=providers,
                now=now,
                shares=shares,
                default_max_running=rules.default.max_running,
                default_max_running_per_key=rules.default.max_running_per_key,
                keys_capped=rules.keys_capped,
                blocked_tenants=sorted(rules.blocked_tenants),
            )

        rows = await self._sql.run(claim, transaction=rules.capped)
        return [self._decode.job(row) for row in rows]
