"""Storage for live output streaming: the durable output log of running jobs (a part of the
Storage contract). The lease holder appends a job's output deltas in small batches; any API
process reads them after a sequence number while the job runs and after it finished."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Protocol

from jobgate.domain.job import Lease


@dataclasses.dataclass(frozen=True, slots=True)
class OutputChunk:
    """One appended batch of output text. `seq` numbers a job's chunks from 1 across all its
    attempts; `generation` is the job's run count when it was written: a chunk whose
    generation differs from the one before it starts the output of a new attempt."""

    job_id: str
    seq: int
    generation: int
    text: str
    created_at: datetime


class OutputStreamStore(Protocol):
    async def job_output_append(
        self, *, lease: Lease, text: str, now: datetime | None = None
    ) -> OutputChunk:
        """Append `text` as the job's next chunk, fenced on the lease (the job must be running
        under this token): zero rows raises errors.LeaseLost and stores nothing. Not
        idempotent: a retry after an unknown outcome may store the text twice, so callers
        retry only errors raised before the statement ran. Wakes the job's stream readers in
        every process (NOTIFY on PostgreSQL; in-process and data_version polling on SQLite)."""
        ...

    async def job_output_read(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[OutputChunk]:
        """The job's chunks with seq > after_seq, in order, at most `limit`. No tenant check:
        the caller has read the job first."""
        ...

    async def job_output_delete(self, *, job_id: str) -> int:
        """Drop the job's output log (a purge); the number of chunks dropped. Idempotent."""
        ...
