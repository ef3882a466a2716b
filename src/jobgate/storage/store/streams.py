"""The output stream store over either dialect: a running job's output log, appended under its
lease. On PostgreSQL the append NOTIFYs every listening process (`s:<job id>`) in the same
statement; on SQLite other processes sharing the file notice through data_version polling."""

from __future__ import annotations

from datetime import datetime

from jobgate import errors
from jobgate.domain.job import Lease
from jobgate.storage.executor import SqlPart
from jobgate.storage.records import OutputChunk


class StreamQueries(SqlPart):
    async def job_output_append(
        self, *, lease: Lease, text: str, now: datetime | None = None
    ) -> OutputChunk:
        row = await self._sql.write_one(
            "job_output_append",
            job_id=lease.job_id,
            lease_token=lease.token,
            text=text,
            now=self._sql.codec.now(now),
        )
        if row is None:
            raise errors.LeaseLost(lease.job_id)
        # This process's readers hear it at once; others through NOTIFY or polling.
        self.changes.streams_changed([lease.job_id])
        return self._decode.record(OutputChunk, row)

    async def job_output_read(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[OutputChunk]:
        rows = await self._sql.read(
            "job_output_read", job_id=job_id, after_seq=after_seq, limit=limit
        )
        return [self._decode.record(OutputChunk, row) for row in rows]

    async def job_output_chars(self, *, job_id: str, generation: int) -> int:
        row = await self._sql.read_one("job_output_chars", job_id=job_id, generation=generation)
        assert row is not None  # a sum answers one row
        return int(row["chars"])
