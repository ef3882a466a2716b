"""FilesStore and BatchesStore on SQLite."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from jobgate.clock import from_unix
from jobgate.storage import sql
from jobgate.storage.changes import ChangeHub
from jobgate.storage.records import (
    BatchCounts,
    BatchItemResult,
    BatchRecord,
    FileChunk,
    FileRecord,
    NewBatchItem,
)
from jobgate.storage.rows import BatchRows
from jobgate.storage.sqlite.database import SqliteDatabase

Q = sql.load("jobgate.storage.sqlite")


def _json_in(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


ROWS = BatchRows(
    time=lambda value: None if value is None else from_unix(value),
    json=lambda value: None if value is None else orjson.loads(value),
)


class SqliteBatches:
    """Mixed into SqliteStorage, which supplies `_db` and `_now`."""

    _db: SqliteDatabase
    changes: ChangeHub

    def _now(self, now: datetime | None) -> float:
        raise NotImplementedError

    async def _write_one(self, name: str, params: Mapping[str, Any]) -> Any:
        return await self._db.write(lambda conn: conn.execute(Q[name].sql, params).fetchone())

    async def _read_all(self, name: str, params: Mapping[str, Any]) -> list[Any]:
        return await self._db.read(lambda conn: conn.execute(Q[name].sql, params).fetchall())

    # -- files ----------------------------------------------------------------------------

    async def file_create(
        self,
        *,
        file_id: str,
        tenant_id: str,
        purpose: str,
        filename: str,
        now: datetime | None = None,
    ) -> None:
        await self._write_one(
            "file_create",
            {
                "id": file_id,
                "tenant_id": tenant_id,
                "purpose": purpose,
                "filename": filename,
                "now": self._now(now),
            },
        )

    async def file_chunk_put(self, *, file_id: str, chunk: FileChunk) -> None:
        await self._write_one(
            "file_chunk_put",
            {
                "file_id": file_id,
                "seq": chunk.seq,
                "first_line": chunk.first_line,
                "line_count": chunk.line_count,
                "data": chunk.data,
            },
        )

    async def file_finish(self, *, file_id: str, bytes: int, lines: int) -> FileRecord:
        row = await self._write_one("file_finish", {"id": file_id, "bytes": bytes, "lines": lines})
        return ROWS.file(row)

    async def file_get(self, *, file_id: str, tenant_id: str | None = None) -> FileRecord | None:
        rows = await self._read_all("file_get", {"id": file_id, "tenant_id": tenant_id})
        return ROWS.file(rows[0]) if rows else None

    async def file_list(
        self, *, tenant_id: str, purpose: str | None, after: str | None, limit: int
    ) -> list[FileRecord]:
        rows = await self._read_all(
            "file_list",
            {"tenant_id": tenant_id, "purpose": purpose, "after_id": after, "limit": limit},
        )
        return [ROWS.file(row) for row in rows]

    async def file_chunks(self, *, file_id: str, from_seq: int, limit: int) -> list[FileChunk]:
        rows = await self._read_all(
            "file_chunks", {"file_id": file_id, "from_seq": from_seq, "limit": limit}
        )
        return [ROWS.chunk(row) for row in rows]

    async def file_delete(self, *, file_id: str, tenant_id: str | None = None) -> bool:
        params = {"id": file_id, "tenant_id": tenant_id}

        def delete(conn: sqlite3.Connection) -> bool:
            conn.execute(Q["file_chunks_delete"].sql, params)
            return conn.execute(Q["file_delete"].sql, params).fetchone() is not None

        return await self._db.write(delete)

    # -- batches --------------------------------------------------------------------------

    async def batch_create(
        self, *, batch: Mapping[str, Any], now: datetime | None = None
    ) -> BatchRecord:
        params = {**batch, "metadata": _json_in(batch.get("metadata")), "now": self._now(now)}
        return ROWS.batch(await self._write_one("batch_create", params))

    async def batch_get(self, *, batch_id: str, tenant_id: str | None = None) -> BatchRecord | None:
        rows = await self._read_all("batch_get", {"id": batch_id, "tenant_id": tenant_id})
        return ROWS.batch(rows[0]) if rows else None

    async def batch_list(
        self, *, tenant_id: str, after: str | None, limit: int
    ) -> list[BatchRecord]:
        rows = await self._read_all(
            "batch_list", {"tenant_id": tenant_id, "after_id": after, "limit": limit}
        )
        return [ROWS.batch(row) for row in rows]

    async def batch_claim_live(
        self, *, limit: int, lease_s: float, now: datetime | None = None
    ) -> list[BatchRecord]:
        params = {"limit": limit, "lease_s": lease_s, "now": self._now(now)}
        rows = await self._db.write(
            lambda conn: conn.execute(Q["batch_claim_live"].sql, params).fetchall()
        )
        return sorted((ROWS.batch(row) for row in rows), key=lambda b: b.created_at)

    async def batch_update(
        self,
        *,
        batch_id: str,
        from_statuses: Sequence[str],
        status: str | None = None,
        final_status: str | None = None,
        expanded_chunks: int | None = None,
        completed_count: int | None = None,
        failed_count: int | None = None,
        output_file_id: str | None = None,
        error_file_id: str | None = None,
        errors: dict[str, Any] | None = None,
        release: bool = False,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        row = await self._write_one(
            "batch_update",
            {
                "id": batch_id,
                "from_statuses": orjson.dumps(list(from_statuses)).decode(),
                "status": status,
                "final_status": final_status,
                "expanded_chunks": expanded_chunks,
                "completed_count": completed_count,
                "failed_count": failed_count,
                "output_file_id": output_file_id,
                "error_file_id": error_file_id,
                "errors": _json_in(errors),
                "release": int(release),
                "now": self._now(now),
            },
        )
        return None if row is None else ROWS.batch(row)

    async def batch_items_put(self, *, batch_id: str, items: Sequence[NewBatchItem]) -> None:
        rows = [
            {
                "batch_id": batch_id,
                "line": item.line,
                "custom_id": item.custom_id,
                "job_id": item.job_id,
                "error": _json_in(item.error),
            }
            for item in items
        ]
        if rows:
            await self._db.write(lambda conn: conn.executemany(Q["batch_items_put"].sql, rows))

    async def batch_counts(self, *, batch_id: str) -> BatchCounts:
        (row,) = await self._read_all("batch_counts", {"batch_id": batch_id})
        return ROWS.counts(row)

    async def batch_items_page(
        self, *, batch_id: str, after_line: int, limit: int
    ) -> list[BatchItemResult]:
        rows = await self._read_all(
            "batch_items_page", {"batch_id": batch_id, "after_line": after_line, "limit": limit}
        )
        return [ROWS.item(row) for row in rows]

    async def batch_live_job_ids(self, *, batch_id: str, limit: int) -> list[str]:
        rows = await self._read_all("batch_live_job_ids", {"batch_id": batch_id, "limit": limit})
        return [row["id"] for row in rows]

    async def batch_event_insert(
        self,
        *,
        batch_id: str,
        tenant_id: str,
        event_type: str,
        status: str,
        now: datetime | None = None,
    ) -> None:
        await self._write_one(
            "batch_event_insert",
            {
                "batch_id": batch_id,
                "tenant_id": tenant_id,
                "event_type": event_type,
                "status": status,
                "now": self._now(now),
            },
        )
        self.changes.outbox_available()
