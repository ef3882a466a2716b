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
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from jobgate.domain.bulk import BulkAction
from jobgate.domain.job import Job, NewJob
from jobgate.domain.verdicts import Finish, Poisoning, RetryDelay
from jobgate.storage.executor import Row
from jobgate.storage.records import (
    BatchChunk,
    ClaimRequest,
    Finished,
    IdempotencyClaim,
    Inserted,
    QueueLimit,
)


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
class BulkChunkRequest:
    """One chunk of a bulk action: `pick` (job_bulk_pick's parameters) picks the jobs,
    `change` (the action's query's, less the ids) changes them."""

    action: BulkAction
    pick: dict[str, Any]
    change: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class BatchChunkWrite:
    """A batch's chunk to store: its jobs (within `queue_limit`), and `params` (batch_items_put's
    and batch_cursor_move's parameters, the batch's fence among them)."""

    chunk: BatchChunk
    params: dict[str, Any]
    queue_limit: QueueLimit | None
    now: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCancelWrite:
    """A batch's cancel: `update` (batch_update's parameters), `change` (job_bulk_cancel's, less
    the ids)."""

    update: dict[str, Any]
    change: dict[str, Any]


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

    async def batch_fail_write(self, params: dict[str, Any]) -> Row | None:
        """batch_fail (its named parameters) in one transaction, its event with it; None when
        the lease token no longer holds the live batch (and nothing written)."""
        ...

    async def batch_finish_write(self, params: dict[str, Any]) -> Row | None:
        """batch_finish (its named parameters) in one transaction: the final status, the result
        files shown and the others dropped, its event; None when the lease token no longer
        holds the finalizing batch (and nothing written)."""
        ...

    async def part_end_write(self, params: dict[str, Any]) -> bool:
        """provider_batch_end (its named parameters) in one transaction, only while the lease
        token holds the batch in progress or cancelling (provider_batch_fence_lock): the lines'
        results (batch_items_native_end), the part marked read back (provider_batch_collected)
        and, if that marked it, its usage ledger row (usage_ledger_part_insert). False: the
        fence did not hold, nothing written; True also when the part was read back already."""
        ...

    async def file_delete_write(self, params: dict[str, Any]) -> bool | str:
        """file_delete (its named parameters) in one transaction: True (deleted), False (no such
        file), or the id of a live batch whose input the file is (and nothing deleted)."""
        ...
