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

from typing import Protocol

from jobgate.domain.job import Job
from jobgate.storage.executor import Row
from jobgate.storage.records import (
    ClaimRequest,
    Finished,
    Inserted,
    PartitionDrops,
    RetentionBatch,
)
from jobgate.storage.transaction_requests import (
    A,
    BatchCancelWrite,
    BatchChunkWrite,
    BatchFailWrite,
    BatchFinishWrite,
    BatchUsageWrite,
    BucketChange,
    BulkChunkRequest,
    DeliveryWrite,
    DiscardWrite,
    DueRecheck,
    EndpointDeleteWrite,
    FileDeleteWrite,
    FinishRequest,
    InsertRequest,
    KeyPurgeWrite,
    PartEndWrite,
    PartitionsDrop,
    PartitionsEnsure,
    ProviderEventWrite,
    Reaped,
    ReapRequest,
    RecordIgnoredWrite,
    Reroute,
    RetentionWrite,
    ScheduleInsertWrite,
    SettleWrite,
)

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
