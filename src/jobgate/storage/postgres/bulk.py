"""BulkStore's chunk on PostgreSQL: picked (FOR UPDATE, in id order) and changed by id in one
transaction, run again if PostgreSQL aborts it to break a deadlock (postgres/deadlocks.py); the
job triggers log each change and NOTIFY the workers."""

from __future__ import annotations

from typing import Any

from jobgate.domain.bulk import BulkAction
from jobgate.storage.postgres.deadlocks import retry_deadlocks
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.store.bulk import BULK_UPDATE, BulkQueries, Changed


class PostgresBulk(BulkQueries):
    _sql: PostgresExecutor

    async def _bulk_chunk(
        self, action: BulkAction, pick: dict[str, Any], change: dict[str, Any]
    ) -> Changed:
        fetch = self._sql.fetch

        async def apply(conn: Conn) -> Changed:
            picked = await fetch(conn, "job_bulk_pick", **pick)
            if not picked:
                return []
            ids = self._sql.codec.json([row["id"] for row in picked])
            rows = await fetch(conn, BULK_UPDATE[action], **change, ids=ids)
            return sorted((row["id"], row["state"]) for row in rows)

        return await retry_deadlocks(lambda: self._sql.run(apply, transaction=True), "bulk chunk")
