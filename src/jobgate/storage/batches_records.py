"""Records of the files and batches store (OpenAI's Batch API)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    tenant_id: str
    purpose: str
    filename: str
    bytes: int
    lines: int
    status: str
    created_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class FileChunk:
    seq: int
    first_line: int
    line_count: int
    data: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class BatchRecord:
    id: str
    tenant_id: str
    status: str
    endpoint: str
    input_file_id: str
    completion_window: str
    metadata: dict[str, Any] | None
    priority: int
    total: int
    expanded_chunks: int
    final_status: str | None
    completed_count: int | None
    failed_count: int | None
    output_file_id: str | None
    error_file_id: str | None
    errors: dict[str, Any] | None
    created_at: datetime
    expires_at: datetime
    in_progress_at: datetime | None
    finalizing_at: datetime | None
    completed_at: datetime | None
    failed_at: datetime | None
    expired_at: datetime | None
    cancelling_at: datetime | None
    cancelled_at: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class NewBatchItem:
    line: int
    custom_id: str
    job_id: str | None
    error: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchItemResult:
    """A line of a batch with its job as it stands (job fields None: refused, or deleted)."""

    line: int
    custom_id: str
    job_id: str | None
    item_error: dict[str, Any] | None
    state: str | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCounts:
    items: int  # lines expanded so far
    completed: int
    failed: int  # failed jobs and lines refused at expansion
    live: int  # jobs queued or running


BATCH_TIME_FIELDS = (
    "created_at", "expires_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at",
    "expired_at", "cancelling_at", "cancelled_at",
)  # fmt: skip
