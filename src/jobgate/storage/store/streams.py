"""The output stream store over either dialect: a running job's output log, appended under its
lease. On PostgreSQL the append NOTIFYs every listening process (`s:<job id>`) in the same
statement; on SQLite other processes sharing the file notice through data_version polling.
Text is stored exactly whatever it holds (storage.text_escape), on both dialects alike."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from jobgate import errors
from jobgate.domain.job import Lease
from jobgate.storage import text_escape
from jobgate.storage.executor import Row, SqlPart
from jobgate.storage.records import OutputChunk


class StreamQueries(SqlPart):
    async def job_output_append(
        self, *, lease: Lease, text: str, continued_chars: int = 0, now: datetime | None = None
    ) -> OutputChunk:
        row = await self._sql.write_one(
            "job_output_append",
            job_id=lease.job_id,
            lease_token=lease.token,
            text=text_escape.escape(text),
            continued_chars=continued_chars,
            now=self._sql.codec.now(now),
        )
        if row is None:
            raise errors.LeaseLost(lease.job_id)
        # This process's readers hear it at once; others through NOTIFY or polling.
        self.changes.streams_changed([lease.job_id])
        return self._chunk(row)

    async def job_output_read(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[OutputChunk]:
        rows = await self._sql.read(
            "job_output_read", job_id=job_id, after_seq=after_seq, limit=limit
        )
        return [self._chunk(row) for row in rows]

    async def job_output_chars(self, *, job_id: str, generation: int) -> int:
        # Summed as stored: an escaped character counts twice, a negligible error in what is
        # an estimate of progress (tokens are characters / 4).
        row = await self._sql.read_one("job_output_chars", job_id=job_id, generation=generation)
        assert row is not None  # a sum answers one row
        return int(row["chars"])

    def _chunk(self, row: Row) -> OutputChunk:
        chunk = self._decode.record(OutputChunk, row)
        text = text_escape.unescape(chunk.text)
        return chunk if text is chunk.text else dataclasses.replace(chunk, text=text)
