"""The webhook transactions on SQLite (part of Transactions): two take several statements in one
write, as SQLite has no data-modifying CTE (PostgreSQL runs each as one statement)."""

from __future__ import annotations

import sqlite3

from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q
from jobgate.storage.transaction_requests import DeliveryWrite, EndpointDeleteWrite, record_params


class SqliteWebhookWrites:
    _db: SqliteDatabase

    async def endpoint_delete_write(self, request: EndpointDeleteWrite) -> bool:
        """Delete the endpoint, then give up its pending deliveries."""
        params = record_params(request)

        def delete(conn: sqlite3.Connection) -> bool:
            if conn.execute(Q["webhook_endpoint_delete"].sql, params).fetchone() is None:
                return False
            conn.execute(Q["outbox_fail_for_endpoint"].sql, params)
            return True

        return await self._db.write(delete)

    async def delivery_write(self, request: DeliveryWrite) -> bool:
        """The attempt (if made), the endpoint's disabling (if asked), then the fenced update."""
        params = record_params(request)

        def record(conn: sqlite3.Connection) -> bool:
            conn.execute(Q["delivery_attempt_insert"].sql, params)
            conn.execute(Q["webhook_endpoint_disable"].sql, params)
            return conn.execute(Q["delivery_update"].sql, params).fetchone() is not None

        return await self._db.write(record)
