"""SQLite's own webhook writes: the two that take several statements in one transaction, as
SQLite has no data-modifying CTE (PostgreSQL runs each as one statement, store/webhooks.py)."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q
from jobgate.storage.store.webhooks import WebhookQueries


class SqliteWebhookStore(WebhookQueries):
    _db: SqliteDatabase

    async def webhook_endpoint_delete(
        self, *, endpoint_id: str, tenant_id: str, now: datetime | None = None
    ) -> bool:
        """Delete the endpoint, then give up its pending deliveries."""
        params = {"id": endpoint_id, "tenant_id": tenant_id, "now": self._sql.codec.now(now)}

        def delete(conn: sqlite3.Connection) -> bool:
            if conn.execute(Q["webhook_endpoint_delete"].sql, params).fetchone() is None:
                return False
            conn.execute(Q["outbox_fail_for_endpoint"].sql, params)
            return True

        return await self._db.write(delete)

    async def _delivery_write(self, params: dict[str, Any]) -> bool:
        """The attempt (if made), the endpoint's disabling (if asked), then the fenced update."""

        def record(conn: sqlite3.Connection) -> bool:
            conn.execute(Q["delivery_attempt_insert"].sql, params)
            conn.execute(Q["webhook_endpoint_disable"].sql, params)
            return conn.execute(Q["delivery_update"].sql, params).fetchone() is not None

        return await self._db.write(record)
