"""A bulk action's chunk on PostgreSQL (Transactions.bulk_chunk): picked (FOR UPDATE, in id order)
and changed by id in one transaction, run again if PostgreSQL aborts it to break a deadlock
(postgres/deadlocks.py); the job triggers log each change and NOTIFY the workers."""

from __future__ import annotations

from jobgate.storage.postgres.deadlocks import retry_deadlocks
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.store.bulk_actions import BULK_UPDATE
from jobgate.storage.transaction_requests import BulkChunkRequest, record_params
from jobgate.storage.transactions import Changed


class PostgresBulkWrites:
    _sql: PostgresExecutor

    async def bulk_chunk(self, request: BulkChunkRequest) -> Changed:
        action, pick, change = request.action, request.pick, record_params(request.change)
        fetch = self._sql.fetch

        async def apply(conn: Conn) -> Changed:
            picked = await fetch(conn, "job_bulk_pick", **pick)
            if not picked:
                return []
            ids = self._sql.codec.json([row["id"] for row in picked])
            rows = await fetch(conn, BULK_UPDATE[action], **change, ids=ids)
            return sorted((row["id"], row["state"]) for row in rows)

        return await retry_deadlocks(lambda: self._sql.run(apply, transaction=True), "bulk chunk")
