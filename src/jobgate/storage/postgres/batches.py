"""The batches' transactions on PostgreSQL (part of Transactions), each of several statements: a
batch's chunk (its jobs, its lines and the cursor, behind the batch's fence and the admission
locks), its cancel, a provider batch's lines read back (behind the fence), and a file's delete
(refused while a live batch reads it); a batch's end and failure are one statement each."""

from __future__ import annotations

from jobgate import failpoints
from jobgate.storage.executor import Row
from jobgate.storage.postgres.deadlocks import retry_deadlocks
from jobgate.storage.postgres.executor import Conn, PostgresExecutor
from jobgate.storage.postgres.insert_many import insert_many_on
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


class PostgresBatchWrites:
    _sql: PostgresExecutor

    async def batch_fail_write(self, request: BatchFailWrite) -> Row | None:
        """One statement (its event written by a CTE)."""
        return await self._sql.write_one("batch_fail", **record_params(request))

    async def batch_finish_write(self, request: BatchFinishWrite) -> Row | None:
        """One statement of data-modifying CTEs."""
        return await self._sql.write_one("batch_finish", **record_params(request))

    async def batch_chunk_write(self, request: BatchChunkWrite) -> Row | None:
        chunk, queue_limit, now = request.chunk, request.queue_limit, request.now
        sql, params = self._sql, request.params()

        async def write(conn: Conn) -> Row | None:
            # The batch's row first, locked: a cancel waits for this chunk, or this chunk
            # sees the cancel and stores nothing.
            if not await sql.fetch(conn, "batch_fence_lock", **params):
                return None
            if chunk.jobs:
                await insert_many_on(sql, conn, chunk.jobs, queue_limit, now)
            failpoints.hit("batch_chunk_jobs_stored")
            await sql.fetch(conn, "batch_items_put", **params)
            (row,) = await sql.fetch(conn, "batch_cursor_move", **params)
            return row

        return await sql.run(write, transaction=True)

    async def batch_cancel_write(self, request: BatchCancelWrite) -> tuple[Row, Changed] | None:
        """The batch's row first (a chunk being stored commits before, and its jobs are then
        seen here), then its jobs locked in id order as a bulk chunk locks them; run again
        if PostgreSQL aborts it to break a deadlock with a worker's heartbeat."""
        update, change = request.update, record_params(request.change)
        sql = self._sql

        async def cancel(conn: Conn) -> tuple[Row, list[tuple[str, str]]] | None:
            updated = await sql.fetch(conn, "batch_update", **update)
            if not updated:
                return None
            picked = await sql.fetch(conn, "batch_cancel_pick", batch_id=update["id"])
            if not picked:
                return updated[0], []
            ids = sql.codec.json([row["id"] for row in picked])
            rows = await sql.fetch(conn, "job_bulk_cancel", **change, ids=ids)
            return updated[0], sorted((row["id"], row["state"]) for row in rows)

        return await retry_deadlocks(lambda: sql.run(cancel, transaction=True), "batch cancel")

    async def part_end_write(self, request: PartEndWrite) -> bool:
        sql, params = self._sql, record_params(request)

        async def end(conn: Conn) -> bool:
            if not await sql.fetch(conn, "provider_batch_fence_lock", **params):
                return False
            await sql.fetch(conn, "batch_items_native_end", **params)
            if await sql.fetch(conn, "provider_batch_collected", **params):
                await sql.fetch(conn, "usage_ledger_part_insert", **params)
            return True

        return await sql.run(end, transaction=True)

    async def file_delete_write(self, request: FileDeleteWrite) -> bool | str:
        sql, params = self._sql, record_params(request)

        async def delete(conn: Conn) -> bool | str:
            # The file's row first: a batch being created over it (batch_create locks it too)
            # commits before the check below, which then sees it, or finds the file gone.
            if not await sql.fetch(conn, "file_lock", **params):
                return False
            reader = await sql.fetch(conn, "file_input_of", **params)
            if reader:
                return str(reader[0]["id"])
            await sql.fetch(conn, "file_delete", **params)
            return True

        return await sql.run(delete, transaction=True)
