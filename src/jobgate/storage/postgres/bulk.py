"""BulkStore's chunk on PostgreSQL: picked (FOR UPDATE, in id order) and changed by id in one
transaction, run again if PostgreSQL aborts it to break a deadlock; the job triggers log each
change and NOTIFY the workers."""

from __future__ import annotations

from typing import Any

import asyncpg

from jobgate import errors
from jobgate.domain.bulk import BulkAction
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.store.bulk import BULK_UPDATE, BulkQueries, Changed

_DEADLOCK_ATTEMPTS = 3


class PostgresBulk(BulkQueries):
    _sql: PostgresExecutor

    async def _bulk_chunk(
        self, action: BulkAction, pick: dict[str, Any], change: dict[str, Any]
    ) -> Changed:
        """A chunk locks its rows in id order, while a worker's heartbeat or batched finish
        locks the rows it holds in its own order: the two can wait on each other, and
        PostgreSQL then aborts one. The chunk rolled back whole, so running it again is safe;
        if it keeps losing, the caller gets StorageUnavailable (a 503 with Retry-After)."""
        fetch = self._sql.fetch

        async def apply(conn: Conn) -> Changed:
            picked = await fetch(conn, "job_bulk_pick", **pick)
            if not picked:
                return []
            ids = self._sql.codec.json([row["id"] for row in picked])
            rows = await fetch(conn, BULK_UPDATE[action], **change, ids=ids)
            return sorted((row["id"], row["state"]) for row in rows)

        for attempt in range(_DEADLOCK_ATTEMPTS):
            try:
                return await self._sql.run(apply, transaction=True)
            except errors.StorageError as exc:
                if not isinstance(exc.__cause__, asyncpg.exceptions.DeadlockDetectedError):
                    raise
                if attempt == _DEADLOCK_ATTEMPTS - 1:
                    raise errors.StorageUnavailable(f"bulk chunk deadlocked: {exc}") from exc
        raise AssertionError("unreachable")
