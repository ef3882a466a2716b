"""The request records of the storage seam (storage.transactions): one frozen record per
Transactions method, its fields the method's arguments; where a dialect binds them as a
statement's named parameters, `record_params` reads them as that mapping."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, Generic, TypeVar

from jobgate.domain import frozen
from jobgate.domain.bulk import BulkAction
from jobgate.domain.job import NewJob
from jobgate.domain.rate_limits import Bucket, BucketState
from jobgate.domain.retention import Horizon
from jobgate.domain.verdicts import Finish, Poisoning, RetryDelay
from jobgate.storage.records import (
    BatchChunk,
    Finished,
    IdempotencyClaim,
    QueueLimit,
)

Held = list[tuple[Bucket, BucketState]]
A = TypeVar("A")
# Given the locked buckets with their states and the database's time (Unix seconds): the new
# states to write (None: write nothing) and the answer.
Change = Callable[[Held, float], tuple[list[BucketState] | None, A]]

# Values the store encoded with its dialect's codec (storage.executor.Codec) for the SQL to bind:
# they differ by dialect (PostgreSQL's pass through, SQLite's are text and numbers).
EncodedTime = Any  # codec.time or codec.now
EncodedJson = Any  # codec.json
EncodedFlag = Any  # codec.flag


@dataclasses.dataclass(frozen=True, slots=True)
class InsertRequest:
    """Storage.job_insert's arguments."""

    chunks: Iterable[Sequence[NewJob]]  # read lazily, once
    keys: Sequence[IdempotencyClaim | None] | None
    queue_limit: QueueLimit | None
    now: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class FinishRequest:
    """Storage.job_finish_many's arguments: fenced verdicts (not empty)."""

    finishes: Sequence[Finish]
    now: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class ReapRequest:
    """Storage.job_reap_expired's arguments."""

    limit: int
    retry_delay: RetryDelay
    now: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class Reaped:
    """What a reap pass did: what it finished (None where the lease was no longer the one read),
    the verdicts it tried, and the jobs it judged poison (for the reaper's log)."""

    finished: list[Finished | None]
    verdicts: list[Finish]
    poisonings: list[Poisoning]


@dataclasses.dataclass(frozen=True, slots=True)
class ChangedBy:
    """Who changes jobs by id, why and when: a bulk change's named parameters besides the ids
    (job_bulk_cancel, job_bulk_redrive, job_bulk_delete)."""

    actor: str
    reason: str
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class BulkChunkRequest:
    """One chunk of a bulk action: `pick` (job_bulk_pick's parameters) picks the jobs, `change`
    changes them. `pick` stays a mapping: it is the job_filter fragment's parameters, made by
    storage.base.bulk_filter_params for the count (a plain read) as well, and named by the
    fragment's SQL."""

    action: BulkAction
    pick: dict[str, Any]
    change: ChangedBy


@dataclasses.dataclass(frozen=True, slots=True)
class BatchChunkWrite:
    """A batch's chunk to store: its jobs (within `queue_limit`) and its lines (`items`, as
    batch_items_put binds them), behind the batch's fence (the chunk's lease token)."""

    chunk: BatchChunk
    items: EncodedJson
    queue_limit: QueueLimit | None
    now: datetime | None

    def params(self) -> dict[str, Any]:
        """The named parameters of batch_fence_lock, batch_items_put and batch_cursor_move."""
        batch_id = self.chunk.batch_id
        return {
            "id": batch_id,
            "batch_id": batch_id,
            "lease_token": self.chunk.lease_token,
            "items": self.items,
            "expanded_chunks": self.chunk.expanded_chunks,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCancelWrite:
    """A batch's cancel: `update` (batch_update's parameters), `change` (job_bulk_cancel's, less
    the ids). `update` stays a mapping: batch_update sets whichever batch columns its caller
    names (None: left as it is), for every batch update (store/batches.py's _update_params)."""

    update: dict[str, Any]
    change: ChangedBy


@dataclasses.dataclass(frozen=True, slots=True)
class DueRecheck:
    """A provider job an accept or a first event sighting found nothing due for."""

    provider: str
    provider_job_id: str
    now: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class BucketChange(Generic[A]):
    """Rate-limit buckets to lock (in this order) and `change` to apply to their states at the
    database's time (`now`: None for its clock)."""

    buckets: list[Bucket]
    now: datetime | None
    change: Change[A]


@dataclasses.dataclass(frozen=True, slots=True)
class Reroute:
    """A job moved to another provider and model, fenced on its lease (`id`, `token`), and the
    event logged for it: job_reroute's named parameters."""

    id: str
    token: str
    provider: str
    model: str
    actor: str
    reason: str
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionsEnsure:
    days_ahead: int
    now: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionsDrop:
    horizon: Horizon
    max_kept: int


@dataclasses.dataclass(frozen=True, slots=True)
class BatchFailWrite:
    """A batch's failure, fenced on its lease token: batch_fail's named parameters."""

    id: str
    lease_token: str
    errors: EncodedJson
    failures: int | None
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class BatchFinishWrite:
    """A batch's end, fenced on its lease token: batch_finish's named parameters (and the
    tenant its event is for)."""

    id: str
    tenant_id: str
    lease_token: str
    status: str
    event_type: str
    completed_count: int
    failed_count: int
    output_file_id: str | None
    output_bytes: int
    output_lines: int
    error_file_id: str | None
    error_bytes: int
    error_lines: int
    usage: EncodedJson
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class PartEndWrite:
    """A provider batch's part read back, fenced on the batch's lease token: provider_batch_end's
    named parameters (`results`: its lines' results, a JSON array; the token counts: their sums,
    billed once)."""

    part_key: str
    batch_id: str
    tenant_id: str
    lease_token: str
    status: str
    request_counts: EncodedJson
    results: EncodedJson
    provider: str
    model: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class FileDeleteWrite:
    """A file to delete (of any tenant when `tenant_id` is None): file_delete's parameters."""

    id: str
    tenant_id: str | None


@frozen.record  # one per settled provider job: built without a call per field
class SettleWrite:
    """A provider's verdict on a background job, fenced on its provider job id: job_settle's
    named parameters."""

    id: str
    provider_job_id: str
    state: str
    result: EncodedJson
    error: EncodedJson
    usage: EncodedJson
    refund_attempt: int  # 1: the attempt does not count
    dead_lettered: EncodedFlag
    retry_in_s: float
    cancel_outcome: str | None
    provider_status: str | None
    watch_in_s: float | None
    actor: str
    reason: str
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class DiscardWrite:
    """A late result to discard and refund: job_discard_late_result's named parameters."""

    id: str
    provider_job_id: str
    to_state: str
    usage: EncodedJson
    actor: str
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderEventWrite:
    """A provider's event to record once: provider_event_record's named parameters."""

    provider: str
    event_id: str
    event_type: str
    provider_job_id: str | None
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionWrite:
    """One batch of finished jobs past the horizon: retention_delete's named parameters."""

    completed_before: EncodedTime
    now: EncodedTime
    limit: int


@dataclasses.dataclass(frozen=True, slots=True)
class BatchUsageWrite:
    """One batch of provider batch parts' ledger rows past the horizon: retention_batch_usage's
    named parameters."""

    completed_before: EncodedTime
    limit: int


@frozen.record  # one per webhook delivery: built without a call per field
class DeliveryWrite:
    """A delivery's attempt and new state, fenced on its lease token: delivery_record's named
    parameters (`disable_reason`: disable the endpoint, for this reason)."""

    id: str
    token: str
    event_id: str
    tenant_id: str
    job_id: str
    job_created_at: EncodedTime
    target: str
    attempt: int
    attempted: EncodedFlag
    status_code: int | None
    latency_ms: int
    error: str | None
    state: str
    retry_in_s: float
    endpoint_id: str | None
    disable_reason: str | None
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointDeleteWrite:
    """A tenant's webhook endpoint to delete: webhook_endpoint_delete's named parameters."""

    id: str
    tenant_id: str
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleInsertWrite:
    """A schedule to create unless its tenant has `max_per_tenant`: schedule_insert's named
    parameters."""

    id: str
    tenant_id: str
    cron: str
    template: EncodedJson
    paused: EncodedFlag
    next_run_at: EncodedTime
    created_at: EncodedTime
    max_per_tenant: int


@dataclasses.dataclass(frozen=True, slots=True)
class RecordIgnoredWrite:
    """A refused transition to log on the job: job_record_ignored's named parameters."""

    id: str
    to_state: str
    actor: str
    reason: str
    now: EncodedTime


@dataclasses.dataclass(frozen=True, slots=True)
class KeyPurgeWrite:
    """Idle per-key rate-limit rows to delete: rate_limit_key_purge's named parameters."""

    limit: int
    now: EncodedTime


# A record's field names and the reader of their values, made once per record type.
_READERS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def record_params(request: Any) -> dict[str, Any]:
    """A request record whose fields are its SQL's named parameters, as the mapping the SQL
    binds: one attribute read per field (no reflection per call, unlike dataclasses.asdict,
    which also copies the values)."""
    reader = _READERS.get(type(request))
    if reader is None:
        names = tuple(field.name for field in dataclasses.fields(request))
        reader = _READERS[type(request)] = names, _read_all(names)
    names, read = reader
    return dict(zip(names, read(request)))  # noqa: B905 (one field list made both)


def _read_all(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A reader of the attributes `names`, as a tuple even of one."""
    one = attrgetter(*names)
    return one if len(names) > 1 else lambda record: (one(record),)
