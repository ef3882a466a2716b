"""Rows of the files and batches tables as records; each dialect passes how it stores times
and JSON."""

from __future__ import annotations

from typing import Any

from jobgate.storage.batches_records import (
    BATCH_TIME_FIELDS,
    BatchCounts,
    BatchItemResult,
    BatchRecord,
    FileChunk,
    FileRecord,
)
from jobgate.storage.rows import JsonDecoder, RowLike, TimeDecoder


class BatchRows:
    def __init__(self, *, time: TimeDecoder, json: JsonDecoder) -> None:
        self.time = time
        self.json = json

    def file(self, row: RowLike) -> FileRecord:
        created = self.time(row["created_at"])
        assert created is not None
        return FileRecord(
            id=row["id"],
            tenant_id=row["tenant_id"],
            purpose=row["purpose"],
            filename=row["filename"],
            bytes=int(row["bytes"]),
            lines=int(row["lines"]),
            status=row["status"],
            created_at=created,
        )

    @staticmethod
    def chunk(row: RowLike) -> FileChunk:
        return FileChunk(
            seq=row["seq"],
            first_line=row["first_line"],
            line_count=row["line_count"],
            data=bytes(row["data"]),
        )

    def batch(self, row: RowLike) -> BatchRecord:
        times: dict[str, Any] = {name: self.time(row[name]) for name in BATCH_TIME_FIELDS}
        return BatchRecord(
            id=row["id"],
            tenant_id=row["tenant_id"],
            status=row["status"],
            endpoint=row["endpoint"],
            input_file_id=row["input_file_id"],
            completion_window=row["completion_window"],
            metadata=self.json(row["metadata"]),
            priority=row["priority"],
            total=row["total"],
            expanded_chunks=row["expanded_chunks"],
            final_status=row["final_status"],
            completed_count=row["completed_count"],
            failed_count=row["failed_count"],
            output_file_id=row["output_file_id"],
            error_file_id=row["error_file_id"],
            errors=self.json(row["errors"]),
            **times,
        )

    def item(self, row: RowLike) -> BatchItemResult:
        return BatchItemResult(
            line=row["line"],
            custom_id=row["custom_id"],
            job_id=row["job_id"],
            item_error=self.json(row["item_error"]),
            state=row["state"],
            result=self.json(row["result"]),
            error=self.json(row["error"]),
        )

    @staticmethod
    def counts(row: RowLike) -> BatchCounts:
        return BatchCounts(
            items=int(row["items"]),
            completed=int(row["completed"]),
            failed=int(row["failed"]),
            live=int(row["live"]),
        )
