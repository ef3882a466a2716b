"""OpenAI's Batch API over jobs: create a batch from an uploaded JSONL file, read it with its
live request counts, list, cancel. The batches role (roles/batch_runner.py) does the rest."""

from __future__ import annotations

import logging
from typing import Any

from jobgate import errors
from jobgate.clock import to_unix
from jobgate.config import Settings
from jobgate.ids import IdGenerator
from jobgate.services.batch_counts import RecentBatchCounts
from jobgate.storage import protocol
from jobgate.storage.records import BatchRecord, ProviderBatch
from jobgate.wire import openai_batches as batches
from jobgate.wire.openai_batches import BatchStatus

log = logging.getLogger(__name__)

MAX_METADATA_KEYS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512


class BatchService:
    def __init__(
        self,
        *,
        storage: protocol.BatchFilesStorage,
        settings: Settings,
        ids: IdGenerator,
        counts: RecentBatchCounts | None = None,
    ) -> None:
        self.storage = storage
        self.settings = settings
        self.ids = ids
        self.counts = counts  # shared by the API's reads (None: count on every view)

    async def create(
        self,
        *,
        tenant_id: str,
        input_file_id: str,
        endpoint: str,
        completion_window: str,
        metadata: dict[str, Any] | None,
    ) -> BatchRecord:
        if endpoint not in batches.ENDPOINTS:
            raise errors.InvalidRequest(
                f"endpoint must be one of {', '.join(batches.ENDPOINTS)}", param="endpoint"
            )
        window_s = batches.COMPLETION_WINDOWS.get(completion_window)
        if window_s is None:
            raise errors.InvalidRequest(
                "completion_window must be '24h'", param="completion_window"
            )
        _check_metadata(metadata)
        record = await self.storage.file_get(file_id=input_file_id, tenant_id=tenant_id)
        if record is None:
            raise errors.NotFound("file", input_file_id)
        if record.purpose != "batch":
            raise errors.InvalidRequest(
                "input_file_id must name a file uploaded with purpose 'batch'",
                param="input_file_id",
            )
        batch = await self.storage.batch_create(
            batch={
                "id": self.ids.new("batch"),
                "tenant_id": tenant_id,
                "endpoint": endpoint,
                "input_file_id": input_file_id,
                "completion_window": completion_window,
                "window_s": window_s,
                "metadata": metadata,
                "priority": self.settings.batch_priority,
            }
        )
        if batch is None:  # deleted since it was read
            raise errors.NotFound("file", input_file_id)
        log.info(
            "batch created",
            extra={"tenant_id": tenant_id, "batch_id": batch.id, "count": record.lines},
        )
        return batch

    async def get(self, *, tenant_id: str | None, batch_id: str) -> BatchRecord:
        """The tenant's batch (any tenant's when `tenant_id` is None: an operator's read)."""
        batch = await self.storage.batch_get(batch_id=batch_id, tenant_id=tenant_id)
        if batch is None:
            raise errors.NotFound("batch", batch_id)
        return batch

    async def list(
        self,
        *,
        tenant_id: str | None,
        after: str | None,
        limit: int,
        status: str | None = None,
    ) -> tuple[list[BatchRecord], bool]:
        """A page of the tenant's batches (every tenant's when `tenant_id` is None)."""
        if after is not None:
            await self.get(tenant_id=tenant_id, batch_id=after)
        found = await self.storage.batch_list(
            tenant_id=tenant_id, after=after, limit=limit + 1, status=status
        )
        return found[:limit], len(found) > limit

    async def cancel(
        self, *, tenant_id: str | None, batch_id: str, actor: str = "api"
    ) -> BatchRecord:
        """Queued lines are cancelled with the batch's move to cancelling (none can start
        once the cancel is answered), running ones asked to stop, finished ones kept.
        Idempotent while cancelling; a batch that ended, or whose window passed first, is a
        conflict. `tenant_id` None: an operator's cancel, of any tenant's."""
        batch = await self.get(tenant_id=tenant_id, batch_id=batch_id)
        changed = await self.storage.batch_cancel(
            batch_id=batch_id,
            from_statuses=(BatchStatus.VALIDATING, BatchStatus.IN_PROGRESS),
            actor=f"batch:{BatchStatus.CANCELLED}",  # as the batches role names it
        )
        if changed is not None:
            log.info(
                "batch cancel",
                extra={"tenant_id": batch.tenant_id, "batch_id": batch_id, "actor": actor},
            )
            return changed
        batch = await self.get(tenant_id=tenant_id, batch_id=batch_id)
        if batch.final_status == BatchStatus.CANCELLED:  # cancelling, finalizing or cancelled
            return batch
        state = (
            batch.status if batch.final_status is None else f"{batch.status} ({batch.final_status})"
        )
        raise errors.Conflict(f"cannot cancel a batch with status {state!r}")

    async def view(self, batch: BatchRecord) -> dict[str, Any]:
        """The batch as OpenAI shows it, with request counts and usage as they stand: none
        while its file is validated, live while it runs, frozen once it ends."""
        counts = await self._counts(batch)
        total, completed, failed = counts[:3]
        usage = batch.usage
        if usage is None and batch.in_progress_at is not None:
            usage = batches.usage_view(*counts[3:])
        parts = await self.storage.provider_batches_of(batch_id=batch.id)
        if batch.completed_count is None:  # live: the parts still running count as they stand
            running = [p.request_counts or {} for p in parts if p.collected_at is None]
            completed += sum(_count(c, "completed") for c in running)
            failed += sum(_count(c, "failed") for c in running)
        view: dict[str, Any] = {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "model": batch.model,
            "errors": batch.errors,
            "input_file_id": batch.input_file_id,
            "completion_window": batch.completion_window,
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": to_unix(batch.created_at),
            "in_progress_at": to_unix(batch.in_progress_at),
            "expires_at": to_unix(batch.expires_at),
            "finalizing_at": to_unix(batch.finalizing_at),
            "completed_at": to_unix(batch.completed_at),
            "failed_at": to_unix(batch.failed_at),
            "expired_at": to_unix(batch.expired_at),
            "cancelling_at": to_unix(batch.cancelling_at),
            "cancelled_at": to_unix(batch.cancelled_at),
            "request_counts": {"total": total, "completed": completed, "failed": failed},
            "usage": usage,
            "metadata": batch.metadata,
        }
        if parts:
            view["provider_batches"] = [_part_view(part) for part in parts]
        return view

    async def _counts(self, batch: BatchRecord) -> tuple[int, int, int, int, int, int]:
        """(total, completed, failed, input, output and cached tokens): zero before the file
        is validated (the total is not known yet); the counts frozen once the batch ended."""
        if batch.in_progress_at is None:
            return 0, 0, 0, 0, 0, 0
        frozen = batch.completed_count is not None and batch.failed_count is not None
        if frozen and batch.usage is not None:
            return batch.total, batch.completed_count or 0, batch.failed_count or 0, 0, 0, 0
        if self.counts is None:
            counts = await self.storage.batch_counts(batch_id=batch.id)
        else:
            counts = await self.counts.of(batch.id)
        completed, failed = counts.completed, counts.failed
        if frozen:
            completed, failed = batch.completed_count or 0, batch.failed_count or 0
        tokens = (counts.input_tokens, counts.output_tokens, counts.cached_tokens)
        return batch.total, completed, failed, *tokens


def _check_metadata(metadata: dict[str, Any] | None) -> None:
    if metadata is None:
        return
    if len(metadata) > MAX_METADATA_KEYS:
        raise errors.InvalidRequest(
            f"metadata holds at most {MAX_METADATA_KEYS} keys", param="metadata"
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY or not isinstance(value, str):
            raise errors.InvalidRequest(
                f"metadata keys are at most {MAX_METADATA_KEY} characters and values strings",
                param="metadata",
            )
        if len(value) > MAX_METADATA_VALUE:
            raise errors.InvalidRequest(
                f"metadata values are at most {MAX_METADATA_VALUE} characters", param="metadata"
            )


def _part_view(part: ProviderBatch) -> dict[str, Any]:
    """A part of the batch as `provider_batches` shows it: the provider, the provider's batch
    id (None until its create is answered), its status and request counts as last read."""
    counts = part.request_counts or {}
    return {
        "provider": part.provider,
        "id": part.provider_batch_id,
        "status": part.status,
        "request_counts": {name: _count(counts, name) for name in ("total", "completed", "failed")},
    }


def _count(counts: dict[str, Any], name: str) -> int:
    value = counts.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
