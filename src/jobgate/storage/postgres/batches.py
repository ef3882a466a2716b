"""FilesStore and BatchesStore on PostgreSQL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

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

ROWS = BatchRows(time=lambda value: value, json=lambda value: value)


class PostgresBatches:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    changes: ChangeHub

    async def _fetch(self, query_name: str, /, **params: Any) -> list[Any]:
        raise NotImplementedError

    async def _fetchrow(self, query_name: str, /, **params: Any) -> Any:
        raise NotImplementedError

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
        await self._fetch(
            "file_create",
            id=file_id,
            tenant_id=tenant_id,
            purpose=purpose,
            filename=filename,
            now=now,
        )

    async def file_chunk_put(self, *, file_id: str, chunk: FileChunk) -> None:
        await self._fetch(
            "file_chunk_put",
            file_id=file_id,
            seq=chunk.seq,
            first_line=chunk.first_line,
            line_count=chunk.line_count,
            data=chunk.data,
        )

    async def file_finish(self, *, file_id: str, bytes: int, lines: int) -> FileRecord:
        return ROWS.file(await self._fetchrow("file_finish", id=file_id, bytes=bytes, lines=lines))

    async def file_get(self, *, file_id: str, tenant_id: str | None = None) -> FileRecord | None:
        row = await self._fetchrow("file_get", id=file_id, tenant_id=tenant_id)
        return None if row is None else ROWS.file(row)

    async def file_list(
        self, *, tenant_id: str, purpose: str | None, after: str | None, limit: int
    ) -> list[FileRecord]:
        rows = await self._fetch(
            "file_list", tenant_id=tenant_id, purpose=purpose, after_id=after, limit=limit
        )
        return [ROWS.file(row) for row in rows]

    async def file_chunks(self, *, file_id: str, from_seq: int, limit: int) -> list[FileChunk]:
        rows = await self._fetch("file_chunks", file_id=file_id, from_seq=from_seq, limit=limit)
        return [ROWS.chunk(row) for row in rows]

    async def file_delete(self, *, file_id: str, tenant_id: str | None = None) -> bool:
        return await self._fetchrow("file_delete", id=file_id, tenant_id=tenant_id) is not None

    # -- batches --------------------------------------------------------------------------

    async def batch_create(
        self, *, batch: Mapping[str, Any], now: datetime | None = None
    ) -> BatchRecord:
        return ROWS.batch(await self._fetchrow("batch_create", **batch, now=now))

    async def batch_get(self, *, batch_id: str, tenant_id: str | None = None) -> BatchRecord | None:
        row = await self._fetchrow("batch_get", id=batch_id, tenant_id=tenant_id)
        return None if row is None else ROWS.batch(row)

    async def batch_list(
        self, *, tenant_id: str, after: str | None, limit: int
    ) -> list[BatchRecord]:
        rows = await self._fetch("batch_list", tenant_id=tenant_id, after_id=after, limit=limit)
        return [ROWS.batch(row) for row in rows]

    async def batch_claim_live(
        self, *, limit: int, lease_s: float, now: datetime | None = None
    ) -> list[BatchRecord]:
        rows = await self._fetch("batch_claim_live", limit=limit, lease_s=lease_s, now=now)
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
        row = await self._fetchrow(
            "batch_update",
            id=batch_id,
            from_statuses=list(from_statuses),
            status=status,
            final_status=final_status,
            expanded_chunks=expanded_chunks,
            completed_count=completed_count,
            failed_count=failed_count,
            output_file_id=output_file_id,
            error_file_id=error_file_id,
            errors=errors,
            release=release,
            now=now,
        )
        return None if row is None else ROWS.batch(row)

    async def batch_items_put(self, *, batch_id: str, items: Sequence[NewBatchItem]) -> None:
        if not items:
            return
        payload = [
            {"line": i.line, "custom_id": i.custom_id, "job_id": i.job_id, "error": i.error}
            for i in items
        ]
        await self._fetch("batch_items_put", batch_id=batch_id, items=payload)

    async def batch_counts(self, *, batch_id: str) -> BatchCounts:
        return BatchRows.counts(await self._fetchrow("batch_counts", batch_id=batch_id))

    async def batch_items_page(
        self, *, batch_id: str, after_line: int, limit: int
    ) -> list[BatchItemResult]:
        rows = await self._fetch(
            "batch_items_page", batch_id=batch_id, after_line=after_line, limit=limit
        )
        return [ROWS.item(row) for row in rows]

    async def batch_live_job_ids(self, *, batch_id: str, limit: int) -> list[str]:
        rows = await self._fetch("batch_live_job_ids", batch_id=batch_id, limit=limit)
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
        await self._fetch(
            "batch_event_insert",
            batch_id=batch_id,
            tenant_id=tenant_id,
            event_type=event_type,
            status=status,
            now=now,
        )
        self.changes.outbox_available()
