"""The storage seam: the transactions whose statements differ between dialects, named. The SQL
store (store.sql_store.SqlStore) is written once over an executor (storage.executor: one
statement, or a transaction of named statements) and one `Transactions`; each dialect
implements this protocol once (postgres/transactions.py, sqlite/transactions.py). A method
takes one request record and is called once per call of the store (a batch, never per job).

What goes here: a write made of several statements whose order, locks or retries the dialect
decides (PostgreSQL: statements and locks inside a transaction; SQLite: one operation of its
single writer, rules computed in Python). A single statement goes in the dialect's queries
file and is run by the store through the executor, not here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, Generic, Protocol, TypeVar

from jobgate.domain import frozen
from jobgate.domain.bulk import BulkAction
from jobgate.domain.job import Job, NewJob
from jobgate.domain.rate_limits import Bucket, BucketState
from jobgate.domain.retention import Horizon
from jobgate.domain.verdicts import Finish, Poisoning, RetryDelay
from jobgate.storage.executor import Row
from jobgate.storage.records import (
    BatchChunk,
    ClaimRequest,
    Finished,
    IdempotencyClaim,
    Inserted,
    PartitionDrops,
    QueueLimit,
    RetentionBatch,
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


# (job id, its state after the change), by job id.
Changed = list[tuple[str, str]]


class Transactions(Protocol):
    """The dialect's side of the seam."""

    async def insert(self, request: InsertRequest) -> Inserted:
        """Insert the jobs, bind their keys (domain.idempotency.decide says which item is new,
        a replay or a conflict) and count the bounds, in one transaction
        (Storage.job_insert's rules)."""
        ...

    async def claim(self, request: ClaimRequest) -> list[Job]:
        """Lease up to `request.limit` claimable jobs within the caps and fair shares of its
        rules, in one transaction; answers them by (priority, run_at, id)."""
        ...

    async def claim_by_id(self, request: ClaimRequest) -> list[Job]:
        """Lease those of `request.ids` that are claimable now within the caps of its rules."""
        ...

    async def finish_many(self, request: FinishRequest) -> list[Finished | None]:
        """Apply fenced verdicts (and bill the successes) in one transaction; one answer per
        verdict, None where the lease was lost (nothing written for it)."""
        ...

    async def reap(self, request: ReapRequest) -> Reaped:
        """Read the expired leases, judge them (domain.verdicts) and finish them, in one
        transaction."""
        ...

    async def bulk_chunk(self, request: BulkChunkRequest) -> Changed:
        """Pick the chunk (job_bulk_pick) and apply the action to its ids (the action's query
        with `change` and `ids`, a JSON array), in one transaction."""
        ...

    async def batch_chunk_write(self, request: BatchChunkWrite) -> Row | None:
        """In one transaction, only while the batch is in progress, unsettled and held by the
        chunk's lease token (else None, nothing written): the chunk's jobs (within its queue
        limit), its lines (batch_items_put), the cursor moved (batch_cursor_move); the batch's
        row as it then stands."""
        ...

    async def batch_cancel_write(self, request: BatchCancelWrite) -> tuple[Row, Changed] | None:
        """In one transaction: the batch's move to cancelling (batch_update; None when it does
        not apply, and nothing written), then every job of its lines still queued cancelled and
        every running one asked to stop (batch_cancel_pick, then job_bulk_cancel); the batch's
        row and the changed jobs."""
        ...

    async def batch_fail_write(self, request: BatchFailWrite) -> Row | None:
        """batch_fail (its named parameters) in one transaction, its event with it; None when
        the lease token no longer holds the live batch (and nothing written)."""
        ...

    async def batch_finish_write(self, request: BatchFinishWrite) -> Row | None:
        """batch_finish (its named parameters) in one transaction: the final status, the result
        files shown and the others dropped, its event; None when the lease token no longer
        holds the finalizing batch (and nothing written)."""
        ...

    async def part_end_write(self, request: PartEndWrite) -> bool:
        """provider_batch_end (its named parameters) in one transaction, only while the lease
        token holds the batch in progress or cancelling (provider_batch_fence_lock): the lines'
        results (batch_items_native_end), the part marked read back (provider_batch_collected)
        and, if that marked it, its usage ledger row (usage_ledger_part_insert). False: the
        fence did not hold, nothing written; True also when the part was read back already."""
        ...

    async def file_delete_write(self, request: FileDeleteWrite) -> bool | str:
        """file_delete (its named parameters) in one transaction: True (deleted), False (no such
        file), or the id of a live batch whose input the file is (and nothing deleted)."""
        ...

    async def settle_write(self, request: SettleWrite) -> Row | None:
        """job_settle (its named parameters): settle the job and bill a final verdict's usage
        once, in one transaction; the job's row, or None when it was not running at that
        provider job."""
        ...

    async def discard_write(self, request: DiscardWrite) -> bool:
        """job_discard_late_result (its named parameters): stop watching the job, log the
        discarded result and bill its usage with a matching refund, in one transaction; False
        when the job was not being watched."""
        ...

    async def provider_event_write(self, request: ProviderEventWrite) -> tuple[bool, bool]:
        """provider_event_record (its named parameters): record the event once and, at its
        first sighting, make its job due for a check now, in one transaction: (the event is
        new, a job became due)."""
        ...

    async def notify_reconcilers(self) -> None:
        """Wake the reconcilers of other processes (a background job is due now); nothing
        where other processes poll."""
        ...

    async def recheck_due(self, request: DueRecheck) -> bool:
        """After a committed accept or first event sighting that found nothing due: look again
        for one the other write could not see (READ COMMITTED); whether one became due.
        Nothing to do with one writer."""
        ...

    async def retention_write(self, request: RetentionWrite) -> RetentionBatch:
        """retention_delete (its named parameters): pick the batch of finished jobs past the
        horizon, roll their usage up into usage_daily (and usage_daily_keys) and delete them
        with every row hanging off them, in one transaction."""
        ...

    async def batch_usage_write(self, request: BatchUsageWrite) -> int:
        """retention_batch_usage (its named parameters): pick the provider batch parts' ledger
        rows past the horizon, roll them into usage_daily_batches and delete them, in one
        transaction; how many."""
        ...

    async def delivery_write(self, request: DeliveryWrite) -> bool:
        """delivery_record (its named parameters): the attempt (if made), the endpoint's
        disabling (if asked) and the delivery's new state, in one transaction; True when the
        lease fence held."""
        ...

    async def endpoint_delete_write(self, request: EndpointDeleteWrite) -> bool:
        """webhook_endpoint_delete (its named parameters): delete the endpoint and give up its
        pending deliveries, in one transaction; False when there was no such endpoint."""
        ...

    async def schedule_insert_write(self, request: ScheduleInsertWrite) -> Row | None:
        """schedule_insert (its named parameters), counting the tenant's schedules in the
        same transaction so that concurrent creates never pass the cap; None at the cap."""
        ...

    async def record_ignored_write(self, request: RecordIgnoredWrite) -> None:
        """job_record_ignored (its named parameters): bump the job's event sequence and write
        the refused transition, in one transaction."""
        ...

    async def buckets_locked(self, request: BucketChange[A]) -> A:
        """Lock the buckets (in their order, rows made if missing), apply the change at the
        database's time and write the new states, in one transaction; what the change
        answers."""
        ...

    async def key_purge_write(self, request: KeyPurgeWrite) -> int:
        """rate_limit_key_purge (its named parameters), with no claim between its check and
        its delete; how many rows it deleted."""
        ...

    async def reroute_write(self, request: Reroute) -> bool:
        """Move the job, fenced on its lease, and log the move as an event, in one transaction;
        False when the lease was lost."""
        ...

    async def partitions_ensure(self, request: PartitionsEnsure) -> int:
        """Make the history's day partitions from today to `days_ahead`; how many it made (none
        where the history is not partitioned)."""
        ...

    async def partitions_drop(self, request: PartitionsDrop) -> PartitionDrops:
        """Drop the history's day partitions past the horizon (rows that must stay moved out,
        at most `max_kept` per day); nothing where the history is not partitioned."""
        ...
