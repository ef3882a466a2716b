"""ProviderBatchStore on both dialects: a batch's parts sent as provider batches, each written
before its create is sent and named by the provider's id once known."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from jobgate.storage.executor import SqlPart
from jobgate.storage.records import ProviderBatch


class ProviderBatchQueries(SqlPart):
    async def provider_batch_intend(
        self,
        *,
        part_key: str,
        batch_id: str,
        provider: str,
        lines: Sequence[int],
        now: datetime | None = None,
    ) -> ProviderBatch:
        codec = self._sql.codec
        row = await self._sql.write_one(
            "provider_batch_intend",
            part_key=part_key,
            batch_id=batch_id,
            provider=provider,
            lines=codec.json(list(lines)),
            now=codec.now(now),
        )
        assert row is not None
        return self._decode.record(ProviderBatch, row)

    async def provider_batch_record(
        self, *, part_key: str, provider_batch_id: str, now: datetime | None = None
    ) -> ProviderBatch | None:
        row = await self._sql.write_one(
            "provider_batch_record",
            part_key=part_key,
            provider_batch_id=provider_batch_id,
            now=self._sql.codec.now(now),
        )
        return None if row is None else self._decode.record(ProviderBatch, row)

    async def provider_batches_of(self, *, batch_id: str) -> list[ProviderBatch]:
        rows = await self._sql.read("provider_batches_of", batch_id=batch_id)
        return [self._decode.record(ProviderBatch, row) for row in rows]
