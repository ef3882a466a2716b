"""The batches' transactions on SQLite (part of Transactions), each in one write of the single
writer: a batch's chunk (its jobs, its lines and the cursor, behind the batch's fence), a provider
batch's lines read back (behind the fence), a file's delete (refused while a live batch reads it), a
batch's end (its final status, its result files shown and the others dropped, its webhook events)
and its failure (with its event), where PostgreSQL's end and failure are one statement each with
data-modifying CTEs."""

from __future__ import annotations

import sqlite3

from jobgate import failpoints
from jobgate.storage.executor import Row
from jobgate.storage.rows import RowDecoder
from jobgate.storage.sqlite.database import SqliteDatabase
from jobgate.storage.sqlite.executor import Q, SqliteExecutor
from jobgate.storage.sqlite.insert import insert_items
from jobgate.storage.transaction_requests import (
    BatchCancelWrite,
    BatchChunkWrite,
    BatchFailWrite,
    BatchFinishWrite,
    FileDeleteWrite,
    PartEndWrite,
    record_params,
)
from jobgate.storage.transactions import Changed


class SqliteBatchWrites:
    _db: SqliteDatabase
    _sql: SqliteExecutor
    _decode: RowDecoder

    async def batch_chunk_write(self, request: BatchChunkWrite) -> Row | None:
        params, queue_limit = request.params(), request.queue_limit
        at = self._sql.codec.now(request.now)
        jobs = request.chunk.jobs

        def write(conn: sqlite3.Connection) -> Row | None:
            if conn.execute(Q["batch_fence_lock"].sql, params).fetchone() is None:
                return None
            insert_items(conn, jobs, None, queue_limit, at, self._decode)
            failpoints.hit("batch_chunk_jobs_stored")
            conn.execute(Q["batch_items_put"].sql, params)
            row: Row | None = conn.execute(Q["batch_cursor_move"].sql, params).fetchone()
            return row

        return await self._db.write(write)

    async def batch_cancel_write(self, request: BatchCancelWrite) -> tuple[Row, Changed] | None:
        update, change = request.update, record_params(request.change)
        json = self._sql.codec.json

        def cancel(conn: sqlite3.Connection) -> tuple[Row, list[tuple[str, str]]] | None:
            row: Row | None = conn.execute(Q["batch_update"].sql, update).fetchone()
            if row is None:
                return None
            picked = conn.execute(Q["batch_cancel_pick"].sql, {"batch_id": update["id"]})
            ids = [found["id"] for found in picked]
            if not ids:
                return row, []
            changed = conn.execute(Q["job_bulk_cancel"].sql, {**change, "ids": json(ids)})
            return row, sorted((job["id"], job["state"]) for job in changed.fetchall())

        return await self._db.write(cancel)

    async def part_end_write(self, request: PartEndWrite) -> bool:
        params = record_params(request)

        def end(conn: sqlite3.Connection) -> bool:
            if conn.execute(Q["provider_batch_fence_lock"].sql, params).fetchone() is None:
                return False
            conn.execute(Q["batch_items_native_end"].sql, params)
            if conn.execute(Q["provider_batch_collected"].sql, params).fetchone() is not None:
                conn.execute(Q["usage_ledger_part_insert"].sql, params)
            return True

        return await self._db.write(end)

    async def batch_fail_write(self, request: BatchFailWrite) -> Row | None:
        params = record_params(request)

        def fail(conn: sqlite3.Connection) -> Row | None:
            row: Row | None = conn.execute(Q["batch_fail_update"].sql, params).fetchone()
            if row is not None:
                event = {
                    "batch_id": request.id,
                    "tenant_id": row["tenant_id"],
                    "status": "failed",
                    "event_type": "batch.failed",
                    "now": request.now,
                }
                conn.execute(Q["batch_event_insert"].sql, event)
            return row

        return await self._db.write(fail)

    async def batch_finish_write(self, request: BatchFinishWrite) -> Row | None:
        params = {**record_params(request), "batch_id": request.id}  # batch_event_insert's name

        def finish(conn: sqlite3.Connection) -> Row | None:
            row: Row | None = conn.execute(Q["batch_finish_update"].sql, params).fetchone()
            if row is None:
                return None
            conn.execute(Q["batch_files_show"].sql, params)
            conn.execute(Q["batch_files_drop_unshown"].sql, params)
            conn.execute(Q["batch_event_insert"].sql, params).fetchall()
            return row

        return await self._db.write(finish)

    async def file_delete_write(self, request: FileDeleteWrite) -> bool | str:
        params = record_params(request)

        def delete(conn: sqlite3.Connection) -> bool | str:
            if conn.execute(Q["file_lock"].sql, params).fetchone() is None:
                return False
            reader = conn.execute(Q["file_input_of"].sql, params).fetchone()
            if reader is not None:
                return str(reader["id"])
            conn.execute(Q["file_delete"].sql, params).fetchall()
            return True

        return await self._db.write(delete)
