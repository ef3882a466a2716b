"""ProviderBatchStore on both dialects: a batch's parts sent as provider batches, each written
before its create is sent and named by the provider's id once known, followed, and read back
into the batch's lines when it ends (one transaction per part, under the batch's fence)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobgate.storage.executor import SqlPart
from jobgate.storage.records import NativeLine, PartEnding, ProviderBatch
from jobgate.storage.transaction_requests import PartEndWrite


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

    async def batch_native_lines(
        self, *, batch_id: str, after_line: int, limit: int
    ) -> list[NativeLine]:
        rows = await self._sql.read(
            "batch_native_lines", batch_id=batch_id, after_line=after_line, limit=limit
        )
        return [self._decode.record(NativeLine, row) for row in rows]

    async def provider_batch_seen(
        self, *, part_key: str, lease_token: str, status: str, request_counts: dict[str, Any]
    ) -> bool:
        seen = await self._sql.write_count(
            "provider_batch_seen",
            part_key=part_key,
            lease_token=lease_token,
            status=status,
            request_counts=self._sql.codec.json(request_counts),
        )
        return seen > 0

    async def provider_batch_end(self, *, ending: PartEnding, now: datetime | None = None) -> bool:
        codec = self._sql.codec
        results = [
            {
                "line": r.line,
                "outcome": r.outcome,
                "result_line": r.result_line,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "cached_tokens": r.cached_tokens,
            }
            for r in ending.results
        ]
        request = PartEndWrite(
            part_key=ending.part_key,
            batch_id=ending.batch_id,
            tenant_id=ending.tenant_id,
            lease_token=ending.lease_token,
            status=ending.status,
            request_counts=codec.json(ending.request_counts),
            results=codec.json(results),
            provider=ending.provider,
            model=ending.model,
            input_tokens=sum(r.input_tokens for r in ending.results),
            output_tokens=sum(r.output_tokens for r in ending.results),
            cache_read_tokens=sum(r.cached_tokens for r in ending.results),
            now=codec.now(now),
        )
        return await self._tx.part_end_write(request)
