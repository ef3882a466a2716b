"""FilesStore and BatchesStore (OpenAI's Batch API), written once over the executor."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from jobgate import errors
from jobgate.domain.states import JobState
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import (
    BatchChunk,
    BatchCounts,
    BatchEnding,
    BatchItemResult,
    BatchRecord,
    FileChunk,
    FileRecord,
    FileUsage,
    NewBatchItem,
    QueueLimit,
)
from jobgate.storage.transaction_requests import (
    BatchCancelWrite,
    BatchChunkWrite,
    BatchFailWrite,
    BatchFinishWrite,
    ChangedBy,
    FileDeleteWrite,
)
from jobgate.wire.openai_batches import BatchStatus

# The batch columns batch_update sets as given (None: left as it is).
_UPDATED = (
    "status", "final_status", "expanded_chunks", "completed_count", "failed_count",
    "output_file_id", "error_file_id", "failures", "total", "model", "lease_token", "lease_s",
)  # fmt: skip


class BatchesQueries(SqlPart):
    # -- files ----------------------------------------------------------------------------

    async def file_create(
        self,
        *,
        file_id: str,
        tenant_id: str,
        purpose: str,
        filename: str,
        expires_after_s: float | None = None,
        batch_id: str | None = None,
        lease_token: str | None = None,
        now: datetime | None = None,
    ) -> bool:
        created = await self._sql.write_count(
            "file_create",
            id=file_id,
            tenant_id=tenant_id,
            purpose=purpose,
            filename=filename,
            expires_after_s=expires_after_s,
            batch_id=batch_id,
            lease_token=lease_token,
            now=self._sql.codec.now(now),
        )
        return created > 0

    async def file_chunk_put(
        self, *, file_id: str, chunk: FileChunk, lease_token: str | None = None
    ) -> bool:
        stored = await self._sql.write_count(
            "file_chunk_put",
            file_id=file_id,
            seq=chunk.seq,
            first_line=chunk.first_line,
            line_count=chunk.line_count,
            data=chunk.data,
            lease_token=lease_token,
        )
        return stored > 0

    async def file_finish(self, *, file_id: str, bytes: int, lines: int) -> FileRecord:
        row = await self._sql.write_one("file_finish", id=file_id, bytes=bytes, lines=lines)
        assert row is not None, f"file_finish: no file {file_id}"
        return self._decode.record(FileRecord, row)

    async def file_get(
        self, *, file_id: str, tenant_id: str | None = None, now: datetime | None = None
    ) -> FileRecord | None:
        row = await self._sql.read_one(
            "file_get", id=file_id, tenant_id=tenant_id, now=self._sql.codec.now(now)
        )
        return None if row is None else self._decode.record(FileRecord, row)

    async def file_list(
        self,
        *,
        tenant_id: str,
        purpose: str | None,
        after: str | None,
        limit: int,
        oldest_first: bool = False,
        now: datetime | None = None,
    ) -> list[FileRecord]:
        rows = await self._sql.read(
            "file_list_oldest_first" if oldest_first else "file_list",
            tenant_id=tenant_id,
            purpose=purpose,
            after_id=after,
            limit=limit,
            now=self._sql.codec.now(now),
        )
        return [self._decode.record(FileRecord, row) for row in rows]

    async def file_usage(self, *, tenant_id: str) -> FileUsage:
        row = await self._sql.read_one("file_usage", tenant_id=tenant_id)
        assert row is not None  # an aggregate answers one row
        return FileUsage(files=int(row["files"]), bytes=int(row["bytes"]))

    async def file_delete_expired(self, *, limit: int, now: datetime | None = None) -> int:
        rows = await self._sql.write(
            "file_delete_expired", limit=limit, now=self._sql.codec.now(now)
        )
        return len(rows)

    async def file_chunks(self, *, file_id: str, from_seq: int, limit: int) -> list[FileChunk]:
        rows = await self._sql.read("file_chunks", file_id=file_id, from_seq=from_seq, limit=limit)
        return [self._decode.record(FileChunk, row) for row in rows]

    async def file_delete(self, *, file_id: str, tenant_id: str | None = None) -> bool:
        outcome = await self._tx.file_delete_write(FileDeleteWrite(file_id, tenant_id))
        if isinstance(outcome, str):
            raise errors.Conflict(
                f"file {file_id!r} is the input of batch {outcome!r}, which has not ended: "
                "delete the file once the batch ends (or cancel the batch)"
            )
        return outcome

    # -- batches --------------------------------------------------------------------------

    async def batch_create(
        self, *, batch: Mapping[str, Any], now: datetime | None = None
    ) -> BatchRecord | None:
        codec = self._sql.codec
        params = {**batch, "metadata": codec.json(batch.get("metadata")), "now": codec.now(now)}
        row = await self._sql.write_one("batch_create", **params)
        return None if row is None else self._decode.record(BatchRecord, row)

    async def batch_get(self, *, batch_id: str, tenant_id: str | None = None) -> BatchRecord | None:
        row = await self._sql.read_one("batch_get", id=batch_id, tenant_id=tenant_id)
        return None if row is None else self._decode.record(BatchRecord, row)

    async def batch_list(
        self, *, tenant_id: str | None, after: str | None, limit: int, status: str | None = None
    ) -> list[BatchRecord]:
        if tenant_id is None:
            rows = await self._sql.read(
                "batch_list_all", status=status, after_id=after, limit=limit
            )
        else:
            rows = await self._sql.read(
                "batch_list", tenant_id=tenant_id, status=status, after_id=after, limit=limit
            )
        return [self._decode.record(BatchRecord, row) for row in rows]

    async def batch_claim_live(
        self, *, limit: int, lease_s: float, now: datetime | None = None
    ) -> list[BatchRecord]:
        rows = await self._sql.write(
            "batch_claim_live", limit=limit, lease_s=lease_s, now=self._sql.codec.now(now)
        )
        return sorted(
            (self._decode.record(BatchRecord, row) for row in rows), key=lambda b: b.created_at
        )

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
        failures: int | None = None,
        total: int | None = None,
        model: str | None = None,
        lease_token: str | None = None,
        lease_s: float | None = None,
        release: bool = False,
        unsettled: bool = False,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        params = self._update_params(
            batch_id=batch_id,
            from_statuses=from_statuses,
            errors=errors,
            release=release,
            unsettled=unsettled,
            now=now,
            status=status,
            final_status=final_status,
            expanded_chunks=expanded_chunks,
            completed_count=completed_count,
            failed_count=failed_count,
            output_file_id=output_file_id,
            error_file_id=error_file_id,
            failures=failures,
            total=total,
            model=model,
            lease_token=lease_token,
            lease_s=lease_s,
        )
        row = await self._sql.write_one("batch_update", **params)
        return None if row is None else self._decode.record(BatchRecord, row)

    def _update_params(
        self,
        *,
        batch_id: str,
        from_statuses: Sequence[str],
        errors: dict[str, Any] | None = None,
        release: bool = False,
        unsettled: bool = False,
        now: datetime | None = None,
        **columns: Any,
    ) -> dict[str, Any]:
        """The `batch_update` query's parameters: `columns` are those of _UPDATED (None: left
        as it is), the others encoded."""
        codec = self._sql.codec
        return {
            "id": batch_id,
            "from_statuses": codec.json(list(from_statuses)),
            **dict.fromkeys(_UPDATED),
            **columns,
            "errors": codec.json(errors),
            "release": codec.flag(release),
            "unsettled": codec.flag(unsettled),
            "now": codec.now(now),
        }

    async def batch_cancel(
        self,
        *,
        batch_id: str,
        from_statuses: Sequence[str],
        actor: str,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        update = self._update_params(
            batch_id=batch_id,
            from_statuses=from_statuses,
            status=BatchStatus.CANCELLING,
            final_status=BatchStatus.CANCELLED,
            unsettled=True,
            now=now,
        )
        change = ChangedBy(actor, "batch cancelled", update["now"])
        found = await self._tx.batch_cancel_write(BatchCancelWrite(update, change))
        if found is None:
            return None
        row, changed = found
        if changed:
            self.changes.jobs_changed(job_id for job_id, _ in changed)
            running = [job_id for job_id, state in changed if state == JobState.RUNNING]
            if running:
                self.changes.cancel_requested(running)
            self.changes.outbox_available()
        return self._decode.record(BatchRecord, row)

    async def batch_chunk_insert(
        self,
        *,
        chunk: BatchChunk,
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        items = self._sql.codec.json([_item_row(item) for item in chunk.items])
        row = await self._tx.batch_chunk_write(BatchChunkWrite(chunk, items, queue_limit, now))
        if row is None:
            return None
        if chunk.jobs:
            self.changes.work_available()
        return self._decode.record(BatchRecord, row)

    async def batch_finish(
        self, *, ending: BatchEnding, now: datetime | None = None
    ) -> BatchRecord | None:
        output, error = ending.output, ending.error
        request = BatchFinishWrite(
            id=ending.batch_id,
            tenant_id=ending.tenant_id,
            lease_token=ending.lease_token,
            status=ending.status,
            event_type=f"batch.{ending.status}",
            completed_count=ending.completed_count,
            failed_count=ending.failed_count,
            output_file_id=None if output is None else output.id,
            output_bytes=0 if output is None else output.bytes,
            output_lines=0 if output is None else output.lines,
            error_file_id=None if error is None else error.id,
            error_bytes=0 if error is None else error.bytes,
            error_lines=0 if error is None else error.lines,
            usage=self._sql.codec.json(ending.usage),
            now=self._sql.codec.now(now),
        )
        row = await self._tx.batch_finish_write(request)
        if row is None:
            return None
        self.changes.outbox_available()
        return self._decode.record(BatchRecord, row)

    async def batch_fail(
        self,
        *,
        batch_id: str,
        lease_token: str,
        errors: dict[str, Any],
        failures: int | None = None,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        row = await self._tx.batch_fail_write(
            BatchFailWrite(
                id=batch_id,
                lease_token=lease_token,
                errors=self._sql.codec.json(errors),
                failures=failures,
                now=self._sql.codec.now(now),
            )
        )
        if row is None:
            return None
        self.changes.outbox_available()
        return self._decode.record(BatchRecord, row)

    async def batch_counts(self, *, batch_id: str) -> BatchCounts:
        row = await self._sql.read_one("batch_counts", batch_id=batch_id)
        assert row is not None  # an aggregate answers one row
        return self._decode.record(BatchCounts, row)

    async def batch_items_page(
        self, *, batch_id: str, after_line: int, limit: int
    ) -> list[BatchItemResult]:
        rows = await self._sql.read(
            "batch_items_page", batch_id=batch_id, after_line=after_line, limit=limit
        )
        lines = (self._decode.record(BatchItemResult, row) for row in rows)
        return [dataclasses.replace(i, custom_id=orjson.loads(i.custom_id)) for i in lines]

    async def batch_live_job_ids(self, *, batch_id: str, limit: int) -> list[str]:
        rows = await self._sql.read("batch_live_job_ids", batch_id=batch_id, limit=limit)
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
        await self._sql.write_count(
            "batch_event_insert",
            batch_id=batch_id,
            tenant_id=tenant_id,
            event_type=event_type,
            status=status,
            now=self._sql.codec.now(now),
        )
        self.changes.outbox_available()


def _item_row(item: NewBatchItem) -> dict[str, Any]:
    """A line as batch_items_put takes it, one object of its JSON array; the custom_id as its
    JSON text, which holds no NUL whatever the custom_id holds."""
    return {
        "line": item.line,
        "custom_id_json": orjson.dumps(item.custom_id).decode(),
        "job_id": item.job_id,
        "error": item.error,
        "provider": item.provider,
        "request": item.request,
    }
