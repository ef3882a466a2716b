"""A bulk action's chunk on SQLite (Transactions.bulk_chunk): picked and changed by id in one write
operation (the single writer keeps it consistent). A delete that changes neither state nor cancel
request fires no trigger, so its event is written here (PostgreSQL's statement writes it in a CTE,
which SQLite's DML cannot)."""

from __future__ import annotations

import sqlite3

from jobgate.domain.bulk import BulkAction
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q, SqliteExecutor
from jobgate.storage.store.bulk_actions import BULK_UPDATE
from jobgate.storage.transaction_requests import BulkChunkRequest, record_params
from jobgate.storage.transactions import Changed


class SqliteBulkWrites:
    _db: SqliteDatabase
    _sql: SqliteExecutor

    async def bulk_chunk(self, request: BulkChunkRequest) -> Changed:
        action, pick, change = request.action, request.pick, record_params(request.change)
        json = self._sql.codec.json

        def apply(conn: sqlite3.Connection) -> Changed:
            ids = [row["id"] for row in conn.execute(Q["job_bulk_pick"].sql, pick)]
            if not ids:
                return []
            by_id = {**change, "ids": json(ids)}
            before = {}
            if action is BulkAction.DELETE:
                before = {
                    row["id"]: row
                    for row in conn.execute(Q["job_bulk_delete_before"].sql, by_id).fetchall()
                }
            rows = conn.execute(Q[BULK_UPDATE[action]].sql, by_id).fetchall()
            for row in rows:
                old = before.get(row["id"])
                if old is None or (
                    old["state"] != row["state"]
                    or old["cancel_requested_at"] != row["cancel_requested_at"]
                ):
                    continue  # the trigger logged this change
                event = {"job_id": row["id"], "seq": row["event_seq"], "applied": 1}
                event |= {"from_state": old["state"], "to_state": row["state"]}
                conn.execute(Q["job_event_insert"].sql, {**change, **event})
            return sorted((row["id"], row["state"]) for row in rows)

        return await self._db.write(apply)
