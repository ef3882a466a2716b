"""Storage for batched enqueue: many jobs in one transaction (a part of the Storage contract)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobgate.domain.job import Job, NewJob
from jobgate.storage.records import QueueLimit


class BatchStore(Protocol):
    async def job_insert_many(
        self,
        *,
        jobs: Sequence[NewJob],
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> list[Job]:
        """Insert queued jobs and their first events in one transaction: all of them or none.
        Answers the jobs in the order given.

        With `queue_limit`, count the tenant's (and everyone's) queued jobs and raise
        errors.QueueFull (retry_after_s 0) when the batch would pass a bound, storing nothing;
        decided together with the insert, like job_insert's.
        Takes no idempotency keys: a batch whose outcome is unknown is retried whole, and a
        duplicate id is refused (errors.StorageError) with nothing stored."""
        ...
