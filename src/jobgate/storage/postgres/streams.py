"""OutputStreamStore on PostgreSQL: each append is one statement that checks the fence, numbers
the chunk and NOTIFYs every listening process (`s:<job id>`), so a reader on any API process
wakes within milliseconds."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from jobgate import errors
from jobgate.domain.job import Lease
from jobgate.storage.records import OutputChunk
from jobgate.wakeups import ChangeHub

T = TypeVar("T")


def _chunk(row: Any) -> OutputChunk:
    return OutputChunk(row["job_id"], row["seq"], row["generation"], row["text"], row["created_at"])


class PostgresStreams:
    """Mixed into PostgresStorage, which supplies the query helpers."""

    changes: ChangeHub

    async def _with_conn(
        self, work: Callable[[Any], Awaitable[T]], *, transaction: bool = False
    ) -> T:
        raise NotImplementedError

    @staticmethod
    async def _run(conn: Any, query_name: str, /, **params: Any) -> list[Any]:
        raise NotImplementedError

    async def job_output_append(
        self, *, lease: Lease, text: str, now: datetime | None = None
    ) -> OutputChunk:
        rows = await self._with_conn(
            lambda conn: self._run(
                conn,
                "job_output_append",
                job_id=lease.job_id,
                lease_token=lease.token,
                text=text,
                now=now,
            )
        )
        if not rows:
            raise errors.LeaseLost(lease.job_id)
        # This process's readers hear it at once; others through the NOTIFY.
        self.changes.streams_changed([lease.job_id])
        return _chunk(rows[0])

    async def job_output_read(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[OutputChunk]:
        rows = await self._with_conn(
            lambda conn: self._run(
                conn, "job_output_read", job_id=job_id, after_seq=after_seq, limit=limit
            )
        )
        return [_chunk(row) for row in rows]

    async def job_output_delete(self, *, job_id: str) -> int:
        rows = await self._with_conn(
            lambda conn: self._run(conn, "job_output_delete", job_id=job_id)
        )
        return len(rows)
