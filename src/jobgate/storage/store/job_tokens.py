"""JobTokenStore on both dialects: the generations of the secret that signs job tokens."""

from __future__ import annotations

from datetime import datetime

from jobgate.storage.executor import SqlPart
from jobgate.storage.records import JobTokenSecret


class JobTokenQueries(SqlPart):
    async def job_token_secrets(self) -> list[JobTokenSecret]:
        rows = await self._sql.read("job_token_secret_list")
        return [self._decode.record(JobTokenSecret, row) for row in rows]

    async def job_token_secret_first(self, *, secret: str, now: datetime | None = None) -> None:
        await self._sql.write_count(
            "job_token_secret_first", secret=secret, now=self._sql.codec.now(now)
        )

    async def job_token_secret_rotate(
        self, *, secret: str, revokes_older: bool, now: datetime | None = None
    ) -> int | None:
        row = await self._sql.write_one(
            "job_token_secret_rotate",
            secret=secret,
            revokes_older=self._sql.codec.flag(revokes_older),
            now=self._sql.codec.now(now),
        )
        return None if row is None else int(row["generation"])

    async def job_token_secret_prune(self, *, max_ttl_s: float, now: datetime | None = None) -> int:
        return await self._sql.write_count(
            "job_token_secret_prune", max_ttl_s=float(max_ttl_s), now=self._sql.codec.now(now)
        )
