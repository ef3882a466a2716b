"""Storage for native bulk submission: many jobs, each with an optional idempotency key, in
one transaction (a part of the Storage contract)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobgate import errors
from jobgate.domain.job import NewJob
from jobgate.storage.records import IdempotencyClaim, QueueLimit, SubmitOutcome


@dataclasses.dataclass(frozen=True, slots=True)
class BulkItem:
    job: NewJob
    idempotency: IdempotencyClaim | None = None


# One item's answer: its job (new or replayed) or the refusal of its key.
BulkResult = SubmitOutcome | errors.IdempotencyKeyReused


class BulkInsertStore(Protocol):
    async def job_insert_bulk(
        self,
        *,
        items: Sequence[BulkItem],
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> list[BulkResult]:
        """Insert queued jobs in one transaction and answer one result per item, in order.

        An item whose key is live with the same body hash answers the bound job (replayed,
        nothing inserted); with another body hash it answers errors.IdempotencyKeyReused in
        its slot and the other items are unaffected. A key repeated inside one call binds to
        the first item that uses it. With `queue_limit`, the new (not replayed) jobs are
        counted against the bounds first and errors.QueueFull is raised with nothing stored.
        Raises errors.IdempotencyInProgress when another transaction holds one of the keys
        past the lock timeout (nothing stored). Safe to retry whole: every keyed item replays.
        """
        ...
