"""Storage for OpenAI-compatible files and batches (a part of the Storage contract)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from jobgate.storage.records import (
    BatchCounts,
    BatchItemResult,
    BatchRecord,
    FileChunk,
    FileRecord,
    NewBatchItem,
)


class FilesStore(Protocol):
    async def file_create(
        self,
        *,
        file_id: str,
        tenant_id: str,
        purpose: str,
        filename: str,
        now: datetime | None = None,
    ) -> None:
        """Insert an `uploading` file, invisible to reads until file_finish."""
        ...

    async def file_chunk_put(self, *, file_id: str, chunk: FileChunk) -> None:
        """Store one chunk of whole lines; idempotent (a chunk stored again is replaced)."""
        ...

    async def file_finish(self, *, file_id: str, bytes: int, lines: int) -> FileRecord:
        """Mark an uploaded file `processed` with its size; answers it."""
        ...

    async def file_get(self, *, file_id: str, tenant_id: str | None = None) -> FileRecord | None:
        """A processed file (None: missing, uploading, or another tenant's)."""
        ...

    async def file_list(
        self, *, tenant_id: str, purpose: str | None, after: str | None, limit: int
    ) -> list[FileRecord]:
        """A page of the tenant's processed files, newest first, after the file `after`."""
        ...

    async def file_chunks(self, *, file_id: str, from_seq: int, limit: int) -> list[FileChunk]:
        """Up to `limit` chunks in order from `from_seq`."""
        ...

    async def file_delete(self, *, file_id: str, tenant_id: str | None = None) -> bool:
        """Delete a file and its chunks (any status); False when there was none."""
        ...


class BatchesStore(Protocol):
    async def batch_create(
        self, *, batch: Mapping[str, Any], now: datetime | None = None
    ) -> BatchRecord:
        """Insert a `validating` batch (keys: id, tenant_id, endpoint, input_file_id,
        completion_window, window_s, metadata, priority, total)."""
        ...

    async def batch_get(
        self, *, batch_id: str, tenant_id: str | None = None
    ) -> BatchRecord | None: ...

    async def batch_list(
        self, *, tenant_id: str, after: str | None, limit: int
    ) -> list[BatchRecord]:
        """A page of the tenant's batches, newest first, after the batch `after`."""
        ...

    async def batch_claim_live(
        self, *, limit: int, lease_s: float, now: datetime | None = None
    ) -> list[BatchRecord]:
        """Live batches (validating, in_progress, cancelling, finalizing) no one else works on,
        leased for `lease_s`: one batches role at a time works on a batch. Every step taken on
        a claimed batch is idempotent, so a lease that runs out early costs repeated work only."""
        ...

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
        """Update a batch only while its status is one of `from_statuses` (None otherwise, and
        nothing written). None leaves a column as it is; a new status stamps its `*_at` time
        (the database's clock) once; `release` drops the batches role's lease."""
        ...

    async def batch_items_put(self, *, batch_id: str, items: Sequence[NewBatchItem]) -> None:
        """Record lines turned into jobs (or refused); idempotent per (batch, line)."""
        ...

    async def batch_counts(self, *, batch_id: str) -> BatchCounts:
        """The batch's lines by their jobs' states, as they stand."""
        ...

    async def batch_items_page(
        self, *, batch_id: str, after_line: int, limit: int
    ) -> list[BatchItemResult]:
        """Lines in order after `after_line`, each with its job's state, result and error."""
        ...

    async def batch_live_job_ids(self, *, batch_id: str, limit: int) -> list[str]:
        """Ids of the batch's jobs still queued or running (for cancel and expiry)."""
        ...

    async def batch_event_insert(
        self,
        *,
        batch_id: str,
        tenant_id: str,
        event_type: str,
        status: str,
        now: datetime | None = None,
    ) -> None:
        """Queue the batch's webhook event (`batch.completed` ...) in the outbox, once per
        endpoint of the tenant that wants it; idempotent (a repeat queues nothing more)."""
        ...
